"""``session-server backup`` / ``restore``: whole agents to and from a backup folder
(offline, beside a running server, or through ``--url``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .jobs import remote_client, run_job
from .options import add_memory_dir, add_remote

__all__ = ["backup_arguments", "restore_arguments", "run_backup", "run_restore"]


def backup_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_ids", nargs="+", metavar="AGENT_ID", help="the agents to back up")
    p.add_argument(
        "--out", required=True, type=Path, help="backup folder (AGENT_ID.sqlite, manifest.json)"
    )
    add_memory_dir(p)
    add_remote(p)


def restore_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", type=Path, help="a backup folder (with manifest.json)")
    p.add_argument(
        "--agent",
        action="append",
        dest="agent_ids",
        metavar="AGENT_ID",
        help="restore only this agent (repeat for several; default: every agent)",
    )
    p.add_argument("--force", action="store_true", help="replace agents that already exist")
    add_memory_dir(p)
    add_remote(p)


def run_backup(args: argparse.Namespace) -> int:
    from ..runtime.backups import RPC_MAX_BACKUP_BYTES, backup_agents

    if args.url:

        async def remote() -> str:
            import base64

            from ..storage.backup import BackupEntry, save_backup

            lines = []
            for agent_id in args.agent_ids:
                async with remote_client(
                    args, agent_id, max_size=2 * RPC_MAX_BACKUP_BYTES
                ) as client:
                    out = await client.backup_agent()
                data = base64.b64decode(out.pop("data"))
                out.pop("agent_id")
                save_backup(args.out, agent_id, data, BackupEntry(**out))
                lines.append(f"backed up {agent_id}: {out['bytes']} bytes, {out['events']} events")
            return "\n".join(lines)

        return run_job(args, remote)

    async def local() -> str:
        done = backup_agents(args.memory_dir, args.agent_ids, args.out)
        return "\n".join(
            f"backed up {d['agent_id']}: {d['bytes']} bytes, {d['sessions']} sessions, "
            f"{d['events']} events -> {args.out / d['file']}"
            for d in done
        )

    return run_job(args, local)


def run_restore(args: argparse.Namespace) -> int:
    from ..runtime.backups import RPC_MAX_BACKUP_BYTES, restore_agents

    if args.url:

        async def remote() -> str:
            import base64

            from ..storage.backup import read_manifest, verify_backup_file

            manifest = read_manifest(args.folder)
            lines = []
            for agent_id in args.agent_ids or list(manifest.agents):
                entry = manifest.agents.get(agent_id)
                if entry is None:
                    raise FileNotFoundError(f"agent {agent_id!r} is not in {args.folder}")
                path = args.folder / entry.file
                verify_backup_file(path, entry, agent_id)
                data = base64.b64encode(path.read_bytes()).decode("ascii")
                async with remote_client(
                    args, agent_id, max_size=2 * RPC_MAX_BACKUP_BYTES
                ) as client:
                    out = await client.restore_agent(data, entry.sha256, force=args.force)
                lines.append(f"restored {agent_id}: {out['sessions']} sessions")
            return "\n".join(lines)

        return run_job(args, remote)

    async def local() -> str:
        done = restore_agents(args.folder, args.memory_dir, args.agent_ids, force=args.force)
        return "\n".join(
            f"restored {d['agent_id']}: {d['sessions']} sessions, {d['events']} events"
            for d in done
        )

    return run_job(args, local)
