"""The resumable repair check (``scan_repair``): a continued scan is the check of the
whole run, and a later start may take over the scan of a clean run (the rule the recent
cache's ``ViewMessages.clean`` relies on: ``test_recent_messages``).

Logs are drawn in the shape agents write (user turns, call groups in both the Chat and
the Responses shape, results in any order, answers), then broken the ways real ones
break (a reused id, a dropped, duplicated or orphan result, a message between a call and
its result), so that clean runs, dirty ones and runs that turn clean again all occur.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.values.codec import event_to_message
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.repair import RepairScan, needs_repair, resumes_scan, scan_repair

from .test_window_equivalence import stored

SID = "s"


@st.composite
def agent_logs(draw: st.DrawFn, max_turns: int = 12) -> list[SessionEvent]:
    """Events (ids and seqs from 1, no turns) of agent-shaped turns, some broken."""
    raw: list[dict[str, Any]] = []
    fresh = 0
    for _ in range(draw(st.integers(0, max_turns))):
        raw.append({"action": "user_message", "content": "q"})
        for _ in range(draw(st.integers(0, 2))):
            ids = []
            for _ in range(draw(st.integers(1, 3))):
                fresh += 1
                ids.append(f"c{fresh}")
            if draw(st.booleans()):
                raw.append({"action": "tool_call_request", "tool_calls": ids})
            else:  # the Responses shape: one call per item
                raw.extend({"action": "tool_call_request", "tool_calls": [i]} for i in ids)
            raw.extend(
                {"action": "tool_result", "tool_call_id": i} for i in draw(st.permutations(ids))
            )
        if draw(st.booleans()):
            raw.append({"action": "agent_message", "content": "a"})
    for _ in range(draw(st.integers(0, 2))):
        if not raw:
            break
        k = draw(st.integers(0, len(raw) - 1))
        edit = draw(st.sampled_from(["drop", "dup", "orphan", "reuse", "between"]))
        if edit == "drop":
            del raw[k]
        elif edit == "dup":
            raw.insert(draw(st.integers(0, len(raw))), raw[k])
        elif edit == "orphan":
            raw.insert(k, {"action": "tool_result", "tool_call_id": "gone"})
        elif edit == "reuse":
            raw.insert(k, {"action": "tool_call_request", "tool_calls": [f"c{max(fresh, 1)}"]})
        else:
            raw.insert(k, {"action": "system_instruction", "content": "between"})
    out = []
    for seq, fields in enumerate(raw, start=1):
        fields = dict(fields)
        if "tool_calls" in fields:
            fields["tool_calls"] = [ToolCall(i, "f") for i in fields["tool_calls"]]
        if fields["action"] == "tool_result":
            fields["tool_name"] = "f"
        out.append(SessionEvent(id=f"e{seq}", session_id=SID, seq=seq, token_count=2, **fields))
    return stored(out)


def _messages(events: list[SessionEvent]) -> list[ContextMessage]:
    return [m for m in map(event_to_message, events) if m is not None]


def _copy(scan: RepairScan) -> RepairScan:
    out = RepairScan()
    out.seen, out.pending, out.answered = set(scan.seen), set(scan.pending), scan.answered
    return out


@settings(max_examples=400, deadline=None)
@given(agent_logs(), st.data())
def test_a_continued_scan_is_the_check_of_the_whole_run(
    events: list[SessionEvent], data: st.DataObject
) -> None:
    messages = _messages(events)
    cut = data.draw(st.integers(0, len(messages)))
    first = scan_repair(messages[:cut])
    assert (first is None) == needs_repair(messages[:cut])
    if first is not None:
        continued = scan_repair(messages[cut:], first)
        assert (continued is None) == needs_repair(messages)


@settings(max_examples=400, deadline=None)
@given(agent_logs(), st.data())
def test_a_later_start_may_take_over_the_scan_of_a_clean_run(
    events: list[SessionEvent], data: st.DataObject
) -> None:
    """``scan_repair``'s rule: from a start that ``resumes_scan`` allows, a clean
    continuation of the longer run's scan proves the shorter run clean."""
    messages = _messages(events)
    cut = data.draw(st.integers(0, len(messages)))
    run, more = messages[:cut], messages[cut:]
    scan = scan_repair(run)
    if scan is None:
        return
    continued = scan_repair(more, _copy(scan))
    for k in range(len(run) + 1):
        if k < len(run) and k > 0 and not resumes_scan(run[k]):
            continue
        if k == len(run) and more and not resumes_scan(more[0]):
            continue
        if continued is not None:
            assert not needs_repair(run[k:] + more), k
