"""Event builders shared by the mirror tests (seq, turn and timestamp as a store fills them)."""

from __future__ import annotations

from typing import Any

from session_server.values.events import SessionEvent, ToolCall
from session_server.values.turns import assign_turns

T0 = 1_770_000_000_000  # ms


def user(text: str, **kw: Any) -> SessionEvent:
    return SessionEvent(action="user_message", content=text, **kw)


def agent(text: str, **kw: Any) -> SessionEvent:
    return SessionEvent(action="agent_message", content=text, **kw)


def calls(*specs: tuple[str, str, dict[str, Any]], content: str = "") -> SessionEvent:
    return SessionEvent(
        action="tool_call_request",
        content=content,
        tool_calls=[ToolCall(id=i, name=n, arguments=a) for i, n, a in specs],
    )


def result(call_id: str, name: str, content: str, ok: bool = True) -> SessionEvent:
    return SessionEvent(
        action="tool_result", content=content, tool_call_id=call_id, tool_name=name, is_success=ok
    )


def compaction(record: dict[str, Any]) -> SessionEvent:
    return SessionEvent(action="compaction", compaction=record, compacted_event_count=0)


def committed(
    events: list[SessionEvent], *, start: int = 1, history: list[SessionEvent] | None = None
) -> list[SessionEvent]:
    """Fill id, session_id, seq, timestamp (+1s per event) and turn like the store does."""
    prior = history or []
    turns, _ = assign_turns([*prior, *events])
    for i, (ev, turn) in enumerate(zip(events, turns[len(prior) :], strict=True)):
        seq = start + i
        ev.id = ev.id or f"ev-{seq}"
        ev.session_id = "s1"
        ev.seq = seq
        ev.timestamp = ev.timestamp or T0 + seq * 1000
        ev.turn = turn
    return events


def summarize_record(
    turn_ids: list[str], episodic: list[dict[str, Any]], semantic: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "strategy": "summarize",
        "turn_ids": turn_ids,
        "seq_range": [1, 2],
        "tail_start_seq": 3,
        "episodic": episodic,
        "semantic": semantic,
    }


def ep(n: int, turns: list[str]) -> dict[str, Any]:
    return {
        "id": f"ep_{n:04d}",
        "ts": 1770000100.0 + n,
        "turn_ids": turns,
        "summary": f"summary {n}",
        "tags": ["t"],
        "salience": 0.5,
    }


def sem(n: int) -> dict[str, Any]:
    return {
        "id": f"sem_{n:04d}",
        "ts": 1770000100.0 + n,
        "fact": f"fact {n}",
        "tags": ["t"],
        "confidence": 0.8,
        "salience": 0.6,
    }
