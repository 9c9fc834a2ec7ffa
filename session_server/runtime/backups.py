"""Backup and restore of whole agents for the CLI and the admin RPC methods (I/O shell).

The file work is ``storage.backup``; this module adds progress bars (tqdm, on a terminal
only) for the CLI, and for the RPC methods the transfer of the file's bytes (base64,
bounded by ``RPC_MAX_BACKUP_BYTES``), so a client never names a path on the server and
the server never writes where a client says.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
from tqdm import tqdm

from ..process.progress import progress_bar
from ..storage.backup import (
    AGENT_FILE,
    BackupEntry,
    backup_agent,
    check_staged,
    install_restore,
    read_manifest,
    restore_agent,
)
from ..storage.file_modes import create_file
from ..storage.staging import staging
from ..values.agent_ids import validate_agent_id
from ..values.errors import InvalidParamsError, NotFoundError, TooLargeError

if TYPE_CHECKING:
    from .registry import ActorRegistry

__all__ = [
    "RPC_MAX_BACKUP_BYTES",
    "backup_agents",
    "backup_bytes",
    "restore_agents",
    "restore_bytes",
]

# The largest agent file an RPC backup or restore carries (base64 makes it a third more).
RPC_MAX_BACKUP_BYTES: Final = 32 * 1024 * 1024


def _bar(total: int, desc: str, progress: bool | None) -> tqdm[Any]:
    return progress_bar(desc=desc, unit="B", total=total, progress=progress)


def _summary(agent_id: str, entry: BackupEntry) -> dict[str, Any]:
    return {"agent_id": agent_id, **msgspec.to_builtins(entry)}


def backup_agents(
    memory_dir: Path, agent_ids: Sequence[str], out_dir: Path, *, progress: bool | None = None
) -> list[dict[str, Any]]:
    """Back up each agent of ``memory_dir`` into ``out_dir`` (while a server may run)."""
    paths = [(a, memory_dir / "agents" / validate_agent_id(a) / AGENT_FILE) for a in agent_ids]
    missing = [a for a, p in paths if not p.is_file()]
    if missing:
        raise NotFoundError(
            f"agent(s) {missing} not found in {memory_dir}", data={"field": "agent_id"}
        )
    out: list[dict[str, Any]] = []
    with _bar(sum(p.stat().st_size for _, p in paths), "backup", progress) as bar:
        for agent_id, path in paths:
            entry = backup_agent(path, out_dir, agent_id, progress=bar.update)
            out.append(_summary(agent_id, entry))
    return out


def restore_agents(
    backup_dir: Path,
    memory_dir: Path,
    agent_ids: Iterable[str] | None = None,
    *,
    force: bool = False,
    progress: bool | None = None,
) -> list[dict[str, Any]]:
    """Restore agents (default: every agent of the manifest) from ``backup_dir``.

    Every agent asked for is checked before any is written: a missing or damaged file, or
    an existing agent without ``force``, refuses the whole restore.
    """
    manifest = read_manifest(backup_dir)
    wanted = list(manifest.agents) if agent_ids is None else list(agent_ids)
    unknown = [a for a in wanted if a not in manifest.agents]
    if unknown:
        raise NotFoundError(
            f"agent(s) {unknown} are not in the backup {backup_dir} "
            f"(it holds {sorted(manifest.agents)})",
            data={"field": "agent_id"},
        )
    exists = [a for a in wanted if (memory_dir / "agents" / a / AGENT_FILE).exists()]
    if exists and not force:
        raise InvalidParamsError(
            f"force: agent(s) {exists} already exist in {memory_dir}; give --force to replace",
            data={"field": "force", "agents": exists},
        )
    out: list[dict[str, Any]] = []
    total = sum(manifest.agents[a].bytes for a in wanted)
    with _bar(total, "restore", progress) as bar:
        for agent_id in wanted:
            entry = manifest.agents[agent_id]
            restore_agent(
                backup_dir / f"{validate_agent_id(agent_id)}.sqlite",
                entry,
                memory_dir / "agents" / agent_id,
                agent_id,
                memory_dir=memory_dir,
                force=force,
            )
            bar.update(entry.bytes)
            out.append(_summary(agent_id, entry))
    return out


async def backup_bytes(registry: ActorRegistry, agent_id: str) -> dict[str, Any]:
    """A consistent copy of the agent file as ``{..., data: base64}`` (``agent.backup``)."""
    path = registry.agent_dir(agent_id) / AGENT_FILE

    def run() -> dict[str, Any]:
        with staging(registry.memory_dir, "backup") as tmp:
            entry = backup_agent(path, tmp, agent_id)
            if entry.bytes > RPC_MAX_BACKUP_BYTES:
                raise TooLargeError(
                    f"agent {agent_id!r}: its file is {entry.bytes} bytes, more than an RPC "
                    f"backup carries ({RPC_MAX_BACKUP_BYTES}); run `session-server backup` "
                    "on the server's machine",
                    data={"bytes": entry.bytes, "limit": RPC_MAX_BACKUP_BYTES},
                )
            data = (tmp / entry.file).read_bytes()
        return {**_summary(agent_id, entry), "data": base64.b64encode(data).decode("ascii")}

    return await registry.executor.run(run)


def _decoded(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise InvalidParamsError(f"data: not base64 ({exc})", data={"field": "data"}) from None


async def restore_bytes(
    registry: ActorRegistry, agent_id: str, data: str, sha256: str, *, force: bool
) -> dict[str, Any]:
    """Replace the agent's file with the given backup (``agent.restore``).

    The file is staged in the memory dir and checked there (``storage.file_check``)
    while the agent keeps serving: a refused file (-32602) changes nothing. Only the
    swap closes the actor; calls arriving meanwhile wait, then see the restored agent;
    ``force`` is needed when the agent exists.
    """
    # Decoded on a worker: 16 MiB of base64 held the event loop about 50 ms.
    raw = await registry.executor.run(_decoded, data)
    if len(raw) > RPC_MAX_BACKUP_BYTES:
        raise TooLargeError(
            f"data: {len(raw)} bytes, more than an RPC restore carries ({RPC_MAX_BACKUP_BYTES})",
            data={"field": "data", "limit": RPC_MAX_BACKUP_BYTES},
        )
    actor = await registry.get(agent_id)
    agent_dir = registry.agent_dir(agent_id)
    if (agent_dir / AGENT_FILE).exists() and not force:
        raise InvalidParamsError(
            f"force: agent {agent_id!r} exists; pass force: true to replace it",
            data={"field": "force"},
        )
    with contextlib.ExitStack() as stack:
        # Staged and checked while the agent keeps serving; only the swap closes it.
        folder = await registry.executor.run(
            stack.enter_context, staging(registry.memory_dir, "restore")
        )

        def check() -> tuple[Path, int]:
            staged = folder / AGENT_FILE
            create_file(staged)
            staged.write_bytes(raw)
            if hashlib.sha256(raw).hexdigest() != sha256:
                raise InvalidParamsError(
                    "sha256: the data's SHA-256 is not the one given (incomplete or changed)",
                    data={"field": "sha256"},
                )
            return staged, check_staged(staged, agent_id, field="data")

        try:
            staged, sessions = await registry.executor.run(check)
            await actor.replace_file(
                functools.partial(install_restore, staged, agent_dir, agent_id, force=force)
            )
        finally:
            await registry.executor.run(stack.close)
    await actor.list_sessions()  # opens the restored file (and repairs mirrors)
    return {"agent_id": agent_id, "bytes": len(raw), "sha256": sha256, "sessions": sessions}
