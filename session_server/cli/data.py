"""``session-server export`` / ``import`` / ``inspect``: one session's data in and out,
and a readable dump of an agent's memory (each offline or through ``--url``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .jobs import remote_client, run_job, run_offline
from .options import add_memory_dir, add_remote, positive_int

__all__ = [
    "export_arguments",
    "import_arguments",
    "inspect_arguments",
    "run_export",
    "run_import",
    "run_inspect",
]


def export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", help="the agent whose session to export")
    p.add_argument("--session", required=True, help="the session id")
    p.add_argument("--out", required=True, type=Path, help="output root (OUT/agents/<name>/)")
    p.add_argument("--name", help="folder name under OUT/agents (default: the agent id)")
    add_memory_dir(p)
    add_remote(p)


def import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", type=Path, help="an export folder (or a root with one agent)")
    p.add_argument("--agent", required=True, help="the agent to import into")
    p.add_argument(
        "--session",
        help="session id to import as (default: the exported session's id; a new uuid for "
        "a folder without session_rows.jsonl)",
    )
    p.add_argument(
        "--new-ids",
        action="store_true",
        help="a copy: fresh session and event ids (to import beside the original)",
    )
    add_memory_dir(p)
    add_remote(p)


def inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", help="the agent to show")
    p.add_argument("--session", help="the session (default: the most recently updated)")
    p.add_argument("--json", action="store_true", help="print the memory view as JSON")
    p.add_argument("--limit", type=positive_int, help="at most this many raw traces")
    add_memory_dir(p)
    add_remote(p)


def run_export(args: argparse.Namespace) -> int:
    from ..runtime import transfer
    from ..storage.backup import agent_held

    if args.url:

        async def remote() -> str:
            from ..mirror_io.jsonl import atomic_write_bytes
            from ..storage.file_modes import make_dir

            async with remote_client(args, args.agent_id) as client:
                params = {"session_id": args.session}
                if args.name:
                    params["name"] = args.name
                out = await client.call("export.session", params)
            folder = args.out / "agents" / out["name"]
            make_dir(folder)
            for name in transfer.REFERENCE_FILES:
                if name in out["files"]:
                    atomic_write_bytes(folder / name, out["files"][name].encode("utf-8"))
                else:
                    (folder / name).unlink(missing_ok=True)
            return f"exported session {args.session} to {folder}"

        return run_job(args, remote)

    async def job(actor: Any) -> str:
        info = await transfer.export_session(actor, args.session, args.out, name=args.name)
        return f"exported {info['event_count']} events to {info['folder']}"

    # Read-only beside a server that holds the agent; otherwise opened as a server would
    # (a file of an older schema is migrated, a mirror a crash left behind repaired).
    held = agent_held(args.memory_dir / "agents" / args.agent_id)
    return run_offline(args, job, readonly=held)


def _imported(info: dict[str, Any]) -> str:
    how = "losslessly" if info.get("lossless") else f"from the reference files ({info['note']})"
    return (
        f"imported {info['event_count']} events into session {info['session_id']} "
        f"(last seq {info['last_seq']}) {how}"
    )


def run_import(args: argparse.Namespace) -> int:
    from ..runtime import transfer

    if args.url:

        async def remote() -> str:
            from ..mirror_io.import_ import find_reference_folder

            folder = find_reference_folder(args.folder)
            files = {
                name: (folder / name).read_text(encoding="utf-8")
                for name in transfer.REFERENCE_FILES
                if (folder / name).is_file()
            }
            params: dict[str, Any] = {"files": files, "new_ids": args.new_ids}
            if args.session:
                params["session_id"] = args.session
            async with remote_client(args, args.agent) as client:
                return _imported(await client.call("import.session", params))

        return run_job(args, remote)

    async def job(actor: Any) -> str:
        info = await transfer.import_session(
            actor, args.folder, session_id=args.session, new_ids=args.new_ids
        )
        return _imported(info)

    return run_offline(args, job, must_exist=False)


def run_inspect(args: argparse.Namespace) -> int:
    from ..mirror.view import MemoryViewOptions, format_memory_view
    from ..mirror_io.view_files import read_memory_view
    from ..storage.backup import agent_held
    from ..values.codec import encode_json

    if args.url:

        async def remote() -> str:
            params: dict[str, Any] = {}
            if args.session:
                params["session_id"] = args.session
            if args.limit:
                params["raw_trace_limit"] = args.limit
            async with remote_client(args, args.agent_id) as client:
                view = await client.call("memory.view", params)
            return encode_json(view) if args.json else format_memory_view(view)

        return run_job(args, remote)

    async def job(actor: Any) -> str:
        # Touching the agent repairs a mirror a crash left behind; drain writes it out.
        # (Read-only beside a server: the server keeps the mirror current itself.)
        await actor.list_sessions()
        await actor.mirror.drain()
        view = read_memory_view(
            args.memory_dir,
            actor.agent_id,
            session_id=args.session,
            options=MemoryViewOptions(raw_trace_limit=args.limit),
        )
        return encode_json(view) if args.json else format_memory_view(view)

    held = agent_held(args.memory_dir / "agents" / args.agent_id)
    return run_offline(args, job, readonly=held)
