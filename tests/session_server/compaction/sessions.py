"""Generated sessions for the compaction tests (events with seq and turn, like the store)."""

from __future__ import annotations

from typing import Any

from session_server.values.events import SessionEvent, ToolCall
from session_server.values.turns import assign_turns

TOOLS = ("search", "read_file", "weather_api")


class SessionLog:
    """Appends events with consecutive seqs and store-like turn numbers."""

    def __init__(self, session_id: str = "s1") -> None:
        self.session_id = session_id
        self.events: list[SessionEvent] = []
        self._last_turn = 0
        self._call_turns: dict[str, int] = {}

    def add(self, **fields: Any) -> SessionEvent:
        seq = len(self.events) + 1
        ev = SessionEvent(
            id=f"e{seq}", session_id=self.session_id, seq=seq, timestamp=1000 * seq, **fields
        )
        (turn,), added = assign_turns([ev], last_turn=self._last_turn, call_turns=self._call_turns)
        ev.turn = turn
        self._last_turn = max(self._last_turn, turn)
        self._call_turns.update(added)
        self.events.append(ev)
        return ev

    def user(self, text: str) -> SessionEvent:
        return self.add(action="user_message", content=text)

    def answer(self, text: str) -> SessionEvent:
        return self.add(action="agent_message", content=text)

    def system(self, text: str) -> SessionEvent:
        return self.add(action="system_instruction", content=text)

    def call(self, call_id: str, name: str, text: str = "", **arguments: Any) -> SessionEvent:
        return self.add(
            action="tool_call_request",
            content=text,
            tool_calls=[ToolCall(id=call_id, name=name, arguments=dict(arguments))],
        )

    def calls(self, *calls: tuple[str, str]) -> SessionEvent:
        return self.add(
            action="tool_call_request",
            tool_calls=[ToolCall(id=c, name=n, arguments={"x": c}) for c, n in calls],
        )

    def result(self, call_id: str, name: str | None, text: str, *, ok: bool = True) -> SessionEvent:
        return self.add(
            action="tool_result",
            content=text,
            tool_call_id=call_id,
            tool_name=name,
            is_success=ok,
        )

    def compaction(self, record: dict[str, Any], count: int = 0) -> SessionEvent:
        return self.add(
            action="compaction",
            content="compaction",
            compacted_event_count=count,
            compaction=record,
        )

    def tool_turn(self, i: int, *, payload: int = 400, tool: str | None = None) -> None:
        """One turn: question, one tool call and its (large) result, an answer."""
        name = tool or TOOLS[i % len(TOOLS)]
        self.user(f"Question {i}: please look into item {i}.")
        self.call(f"call_{i}", name, query=f"item {i}", page=i)
        self.result(f"call_{i}", name, f"result {i}: " + ("data " * payload))
        self.answer(f"Answer {i}: item {i} is fine.")

    def chat_turn(self, i: int) -> None:
        self.user(f"Message {i}")
        self.answer(f"Reply {i}")


def tool_session(turns: int, *, payload: int = 400, session_id: str = "s1") -> SessionLog:
    log = SessionLog(session_id)
    for i in range(1, turns + 1):
        log.tool_turn(i, payload=payload)
    return log
