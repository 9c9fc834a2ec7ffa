"""The builder's message pass as it was before the recent cache kept each event's
message: the oracle ``test_message_memo`` compares ``compaction.builder.build_parts``
against (with the cache's messages and without).

``build_parts`` and ``_clean_messages`` of ``session_server/compaction/builder.py`` at
bb73a46, unchanged; kept here, not in the package, so the package has one builder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from session_server.compaction.builder import BuiltContext
from session_server.compaction.memory import memory_block
from session_server.compaction.placeholders import (
    PlaceholderParams,
    call_name_index,
    compact_message,
)
from session_server.values.codec import event_to_message
from session_server.values.events import ContextMessage, SessionEvent
from session_server.values.records import record_memory
from session_server.values.repair import needs_repair, repair_tool_pairing
from session_server.values.tokens import get_counter

from ..values.window_reference import drop_orphan_results

__all__ = ["build_parts"]


def build_parts(
    events: Sequence[SessionEvent],
    record: Mapping[str, Any] | None,
    *,
    max_episodic_items: int = 3,
    max_semantic_items: int = 20,
    model: str | None = None,
) -> BuiltContext:
    """The messages (placeholders applied) and memory block for ``events`` and ``record``.

    ``model`` picks the encoding used to count messages a placeholder changed.
    """
    evs = [e for e in events if e.action != "compaction"]
    extra: list[str] = []
    memory = record_memory(record)
    if memory is not None:
        tail_start = memory["tail_start_seq"]
        evs = [e for e in evs if e.seq >= tail_start]
        extra.append(
            memory_block(
                memory["episodic"],
                memory["semantic"],
                max_episodic_items=max_episodic_items,
                max_semantic_items=max_semantic_items,
                tail_start_turn=memory["tail_start_turn"],
            )
        )
    params = (
        PlaceholderParams.from_record(record)
        if record is not None and record.get("strategy") == "compact"
        else None
    )
    if params is None:
        clean = _clean_messages(evs)
        if clean is not None:
            return BuiltContext(extra, clean[0], 0, clean[1])
    evs = drop_orphan_results(evs)
    names = call_name_index(evs) if params is not None else {}
    messages: list[ContextMessage] = []
    turns: list[int | None] = []  # the stored turn of each message's event
    # Token count of each message by identity (None: the event has no stored count);
    # messages a placeholder changed are counted afresh, and so are the ones the repair
    # below makes up or changes (they are not in this map).
    known: dict[int, int | None] = {}
    removed = 0
    counter = None
    for ev in evs:
        msg = event_to_message(ev)
        if msg is None:
            continue
        n = 0
        if params is not None:
            msg, n = compact_message(ev, msg, params, names)
            removed += n
        if n:
            counter = counter or get_counter(model)
            known[id(msg)] = counter.count_message(msg)
        else:
            known[id(msg)] = ev.token_count
        messages.append(msg)
        turns.append(ev.turn)
    # ``mapped`` stays referenced (a local lives until the return): the ids in ``known``
    # cannot be reused by the messages the repair makes.
    mapped = messages
    repaired = repair_tool_pairing(mapped, turns=turns)
    total = 0
    for msg in repaired:
        if id(msg) in known:
            tokens = known[id(msg)]
        else:
            counter = counter or get_counter(model)
            tokens = counter.count_message(msg)
        if tokens is None:
            return BuiltContext(extra, repaired, removed, None)
        total += tokens
    return BuiltContext(extra, repaired, removed, total)


def _clean_messages(
    events: Sequence[SessionEvent],
) -> tuple[list[ContextMessage], int | None] | None:
    """The messages of ``events`` and their stored token total, when they need neither
    the orphan filter nor any repair (``needs_repair``: every result follows its call in
    its group, so none is an orphan either); ``None`` otherwise. The common case, in
    one pass over the events and one over the messages."""
    messages: list[ContextMessage] = []
    total: int | None = 0
    for ev in events:
        msg = event_to_message(ev)
        if msg is None:
            continue
        messages.append(msg)
        if total is not None:
            total = None if ev.token_count is None else total + ev.token_count
    if needs_repair(messages):
        return None
    return messages, total
