"""Running a command's work: on a registry over ``--memory-dir`` or through ``--url``;
project errors exit 1 with their message."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["remote_client", "run_job", "run_offline"]


def _fail(args: argparse.Namespace, exc: Exception) -> int:
    message = getattr(exc, "message", None) or str(exc)
    print(f"session-server {args.command}: {message}", file=sys.stderr)
    return 1


def run_job(args: argparse.Namespace, job: Callable[[], Any]) -> int:
    """Run the coroutine ``job()``; project errors exit 1 with their message."""
    from ..values.errors import SessionServerError

    try:
        result = asyncio.run(job())
    except (SessionServerError, OSError) as exc:
        return _fail(args, exc)
    if result is not None:
        print(result)
    return 0


def run_offline(
    args: argparse.Namespace, job: Any, *, must_exist: bool = True, readonly: bool = False
) -> int:
    """Run ``job(actor)`` on a registry over ``--memory-dir``; errors exit 1 with a message.

    ``readonly``: open the agent read-only, without its lock, so this works beside a server
    that holds it (WAL: readers never block the writer). Otherwise a server holding the
    agent makes this fail with a clear message rather than write beside it.
    ``must_exist``: refuse an unknown agent instead of creating it.
    """
    from ..runtime.registry import ActorRegistry
    from ..values.errors import NotFoundError

    agent_id = args.agent_id if hasattr(args, "agent_id") else args.agent

    async def run() -> Any:
        # Not the snapshot index's owner: a server may run beside (its index goes stale).
        async with ActorRegistry(
            args.memory_dir, idle_timeout=None, readonly=readonly, index_owner=False
        ) as reg:
            if must_exist and not (reg.agent_dir(agent_id) / "agent.sqlite").is_file():
                raise NotFoundError(f"agent {agent_id!r} not found in {args.memory_dir}")
            return await job(await reg.get(agent_id))

    return run_job(args, run)


def remote_client(args: argparse.Namespace, agent_id: str, *, max_size: int | None = None) -> Any:
    from ..client import SessionClient
    from ..rpc.protocol import DEFAULT_MAX_FRAME_BYTES

    return SessionClient(
        args.url, agent_id, token=args.token, max_size=max_size or DEFAULT_MAX_FRAME_BYTES
    )
