"""Compare a session's JSONL mirror on disk with a fresh rendering of its events.

``mirror_files(memory_dir, agent_id, session_id)`` reads the four mirror files that exist;
``expected_mirror(events)`` renders them from the events (``render_mirror`` +
``encode_lines``), leaving out files that would be empty (the writer removes those). Compare
them after a restart and an activation (the activation repairs a mirror left behind by a
crash), e.g. with ``activate_and_close``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from session_server.mirror.model import render_mirror
from session_server.mirror_io.jsonl import encode_lines
from session_server.mirror_io.repair import MIRROR_FILES
from session_server.runtime.registry import ActorRegistry
from session_server.values.events import SessionEvent

__all__ = ["activate_and_close", "expected_mirror", "mirror_files"]


def mirror_files(memory_dir: Path, agent_id: str, session_id: str) -> dict[str, bytes]:
    folder = memory_dir / "agents" / agent_id / "sessions" / session_id
    return {name: (folder / name).read_bytes() for name in MIRROR_FILES if (folder / name).exists()}


def expected_mirror(events: list[SessionEvent]) -> dict[str, bytes]:
    rendered = render_mirror(events)
    files = {
        "raw_traces.jsonl": encode_lines(rendered.active),
        "raw_traces_archive.jsonl": encode_lines(rendered.archive),
        "episodic.jsonl": encode_lines(rendered.episodic),
        "semantic.jsonl": encode_lines(rendered.semantic),
    }
    return {name: data for name, data in files.items() if data}


async def activate_and_close(
    memory_dir: Path, agent_ids: Iterable[str]
) -> dict[str, dict[str, list[SessionEvent]]]:
    """Open a registry, activate each agent (repairing its mirror), read every session's
    events, close the registry (which flushes the mirror). Returns agent -> session -> events."""
    out: dict[str, dict[str, list[SessionEvent]]] = {}
    async with ActorRegistry(memory_dir, synchronous="FULL", idle_timeout=None) as registry:
        for agent_id in agent_ids:
            actor = await registry.get(agent_id)
            sessions = await actor.list_sessions()
            out[agent_id] = {
                str(s["id"]): await actor.load_events(str(s["id"]), limit=None, tail=False)
                for s in sessions
            }
    return out
