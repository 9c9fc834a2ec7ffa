"""Repair of tool call / tool result pairing in a built context (pure).

Stored histories are whatever clients persisted: an agent that crashed (or was cancelled,
or hit its step limit) between a tool call and its result, a provider that reuses
``call_1`` in every turn, results that arrived after later messages, results whose call
was never stored. No provider accepts such a history as it is, and stored events are
never rewritten, so the context builder repairs the *messages* it builds:

- **attribution**: a result answers the latest unanswered call with its id before it (a
  call id reused in a later turn therefore pairs with its own results); a result that
  comes before every call with its id answers the first of them *in its own turn* (a
  result stored before its call), never a call of another turn; a result may also name
  a call by its repaired id (see renaming). Turns are the stored ones when the caller
  passes them (``turns``), otherwise a user message starts a new turn. A result that answers nothing (its call is not
  in the context, or the call already has a result) is left out.
- **placement**: the results of a *call group* (a run of assistant messages with tool
  calls, as the Responses API's one ``function_call`` per item produces, with nothing
  between them but results that answer none of the group's calls) come right after the
  group, in the order they were stored; a late result moves up to its call.
- **missing results**: a call without a result gets a synthetic error result right after
  its group, with the content ``⟦missing: no result was recorded for NAME
  (call_id=ID)⟧`` and ``synthetic: true`` — unless its group is the last thing in the
  context (nothing but results after it): those calls stay pending, since the caller is
  about to answer them.
- **renaming**: a call id already used earlier in the context becomes ``ID_2`` (then
  ``ID_3``, ... skipping any id already used), and its results follow. The choice
  depends only on the messages before it, so the prompt prefix is byte-identical from
  one build to the next.

The output passes :func:`session_server.adapters.checks.check_tool_pairing` for every input. Messages
that need no repair are returned as the same objects, so callers can tell what changed.

Most contexts need no repair at all: :func:`needs_repair` tells so in one pass, and then
the messages are returned as they are without the attribution and placement passes (the
output is the same list either way: ``tests/session_server/adapters/test_repair_property.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from .events import ContextMessage, ToolCall

__all__ = [
    "RepairScan",
    "missing_result_text",
    "needs_repair",
    "repair_tool_pairing",
    "resumes_scan",
    "scan_repair",
]


def missing_result_text(tool_name: str, call_id: str) -> str:
    """The content of the synthetic result for a call that never got one."""
    return f"⟦missing: no result was recorded for {tool_name} (call_id={call_id})⟧"


@dataclass
class _Slot:
    """One tool call of the context: where it is, its ids, and the result attributed to it."""

    message: int
    turn: int
    original: str
    id: str
    name: str
    result: int | None = None


@dataclass
class _Calls:
    slots: list[_Slot] = field(default_factory=list)
    by_original: dict[str, list[_Slot]] = field(default_factory=dict)
    by_id: dict[str, _Slot] = field(default_factory=dict)


def _unique(call_id: str, used: set[str]) -> str:
    k = 2
    while f"{call_id}_{k}" in used:
        k += 1
    return f"{call_id}_{k}"


def _message_turns(
    messages: Sequence[ContextMessage], turns: Sequence[int | None] | None
) -> list[int]:
    """The turn of each message: ``turns`` when given in full (one per message, none
    ``None``), else counted from the user messages (each starts a turn)."""
    if turns is not None and len(turns) == len(messages) and None not in turns:
        return [t or 0 for t in turns]
    out: list[int] = []
    turn = 0
    for msg in messages:
        turn += msg.role == "user"
        out.append(turn)
    return out


def _collect_calls(messages: Sequence[ContextMessage], turns: list[int]) -> _Calls:
    calls = _Calls()
    used: set[str] = set()
    for i, msg in enumerate(messages):
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        for call in msg.tool_calls:
            base = call.id or "call"  # an empty id (never accepted, but readable) gets one
            new_id = base if base not in used else _unique(base, used)
            used.add(new_id)
            slot = _Slot(i, turns[i], call.id, new_id, call.name)
            calls.slots.append(slot)
            calls.by_original.setdefault(call.id, []).append(slot)
            calls.by_id[new_id] = slot
    return calls


def _attribute(messages: Sequence[ContextMessage], calls: _Calls, turns: list[int]) -> None:
    """Give each result to the call it answers (rules in the module docstring)."""
    for j, msg in enumerate(messages):
        if msg.role != "tool" or not msg.tool_call_id:
            continue
        call_id = msg.tool_call_id
        candidates = calls.by_original.get(call_id)
        if candidates is None:
            # Not an id any call was stored with: maybe a repaired one (``ID_2``).
            renamed = calls.by_id.get(call_id)
            if renamed is not None and renamed.result is None:
                renamed.result = j
            continue
        before = [s for s in candidates if s.message < j]
        if before:
            latest_open = next((s for s in reversed(before) if s.result is None), None)
            if latest_open is not None:
                latest_open.result = j
            continue  # otherwise a second result for an answered call: left out
        first_open = next((s for s in candidates if s.result is None and s.turn == turns[j]), None)
        if first_open is not None:
            first_open.result = j


def _renamed(msg: ContextMessage, slots: list[_Slot]) -> ContextMessage:
    if all(s.id == s.original for s in slots):
        return msg
    tool_calls = [
        ToolCall(id=s.id, name=c.name, arguments=c.arguments)
        for s, c in zip(slots, msg.tool_calls or (), strict=True)
    ]
    return msgspec.structs.replace(msg, tool_calls=tool_calls)


def _result(msg: ContextMessage, slot: _Slot) -> ContextMessage:
    if msg.tool_call_id == slot.id:
        return msg
    return msgspec.structs.replace(msg, tool_call_id=slot.id)


def _synthetic(slot: _Slot) -> ContextMessage:
    return ContextMessage(
        role="tool",
        content=missing_result_text(slot.name, slot.id),
        tool_call_id=slot.id,
        name=slot.name or None,
        is_error=True,
        synthetic=True,
    )


def _next_in_group(
    messages: Sequence[ContextMessage], k: int, group: list[_Slot], slots_of: dict[int, list[_Slot]]
) -> int | None:
    """The index of the call message that joins ``group`` after ``k - 1``, if any.

    Results that answer none of the group's calls (late ones placed elsewhere, orphans
    left out) do not end a group; a result of the group does: calls after it are the
    model's next step, a new group.
    """
    own = {s.result for s in group if s.result is not None}
    while k < len(messages) and messages[k].role == "tool":
        if k in own:
            return None
        k += 1
    return k if k in slots_of else None


class RepairScan:
    """Where :func:`scan_repair` stands after a run of messages that needs no repair: the
    call ids seen, the calls of the current group without a result yet, and whether a
    result of that group was seen. Continuing it over the messages that follow answers
    :func:`needs_repair` for the longer run without a second pass over the first part."""

    __slots__ = ("answered", "pending", "seen")

    def __init__(self) -> None:
        self.seen: set[str] = set()
        # An empty or ``None`` id is never pending (a call with one needs repair).
        self.pending: set[str | None] = set()
        self.answered = False


def scan_repair(
    messages: Sequence[ContextMessage], scan: RepairScan | None = None
) -> RepairScan | None:
    """:func:`needs_repair`'s pass over ``messages``, continuing ``scan`` (a fresh one
    when ``None``): the scan after them, or ``None`` when the run needs repair (``scan``
    is then partly advanced: drop it).

    Resuming from a later start (the rule the recent cache relies on): when the scan of
    ``run`` found it clean and ``run[k]`` is neither a result nor a message with calls,
    then ``run[k:] + more`` needs no repair if continuing that scan over ``more`` finds
    none. Before such a message no call of the scan is pending (one would need repair
    there) and after it no result of the group was seen, in both passes; from there the
    pass over ``run[k:]`` alone holds the same state except fewer ids seen, and fewer
    ids seen never finds a repair the longer pass did not.
    """
    if scan is None:
        scan = RepairScan()
    seen, pending, answered = scan.seen, scan.pending, scan.answered
    for msg in messages:
        role = msg.role
        if role == "tool":
            try:
                pending.remove(msg.tool_call_id)
            except KeyError:
                return None
            answered = True
        elif role == "assistant" and msg.tool_calls:
            if answered:
                if pending:
                    return None  # an earlier call of the group gets a synthetic result
                answered = False  # a new group begins
            for call in msg.tool_calls:
                call_id = call.id
                if not call_id or call_id in seen:
                    return None
                seen.add(call_id)
                pending.add(call_id)
        else:
            if pending:
                return None  # a call left unanswered before another message
            answered = False
    scan.answered = answered
    return scan


def resumes_scan(message: ContextMessage) -> bool:
    """Whether a run that starts at ``message`` may take over the scan of a longer clean
    run holding it (see :func:`scan_repair`): neither a result nor a message with calls."""
    return message.role != "tool" and not (message.role == "assistant" and message.tool_calls)


def needs_repair(messages: Sequence[ContextMessage]) -> bool:
    """Whether :func:`repair_tool_pairing` could change ``messages``; ``False`` only when
    it returns them as they are (one pass, no allocation per message).

    ``False`` exactly for histories in the shape a well-behaved agent writes: every call
    id is non-empty and used once; every result answers a call of the current call group
    (the assistant messages with calls since the last other message, up to the first
    call message after one of their results) that has no result yet; and every call of a
    group is answered before the next message that is neither a result nor a call of the
    group; only the last group, with nothing but its results after it, may stay open.
    Anything else (a reused id, a late, duplicate or orphan result, a missing one) is
    left to the full repair, which also decides attribution by turns.
    """
    return scan_repair(messages) is None


def repair_tool_pairing(
    messages: Sequence[ContextMessage], *, turns: Sequence[int | None] | None = None
) -> list[ContextMessage]:
    """The messages with every call paired with one result (see the module docstring).

    ``turns`` holds the stored turn of each message (the turn of the event it was built
    from); without it (or with a ``None`` in it) a user message starts a turn.
    """
    if not needs_repair(messages):
        return list(messages)
    return _repair(messages, turns)


def _repair(
    messages: Sequence[ContextMessage], turns: Sequence[int | None] | None
) -> list[ContextMessage]:
    """The full repair (attribution, placement, synthetic results, renaming)."""
    if not any(m.role == "tool" or m.tool_calls for m in messages):
        return list(messages)
    turn_of = _message_turns(messages, turns)
    calls = _collect_calls(messages, turn_of)
    _attribute(messages, calls, turn_of)
    slots_of: dict[int, list[_Slot]] = {}
    for slot in calls.slots:
        slots_of.setdefault(slot.message, []).append(slot)
    # The last message that is not a result: a call group ending there may stay pending.
    last_other = max((i for i, m in enumerate(messages) if m.role != "tool"), default=-1)
    out: list[ContextMessage] = []
    n = len(messages)
    i = 0
    while i < n:
        msg = messages[i]
        if msg.role == "tool":
            i += 1  # placed with its call, or left out
            continue
        if i not in slots_of:
            out.append(msg)
            i += 1
            continue
        group: list[_Slot] = []
        end: int | None = i
        while end is not None:
            out.append(_renamed(messages[end], slots_of[end]))
            group.extend(slots_of[end])
            i = end
            end = _next_in_group(messages, end + 1, group, slots_of)
        end, i = i, i + 1
        answered = sorted((s for s in group if s.result is not None), key=lambda s: s.result or 0)
        out.extend(_result(messages[s.result], s) for s in answered if s.result is not None)
        if end < last_other:
            out.extend(_synthetic(s) for s in group if s.result is None)
    return out
