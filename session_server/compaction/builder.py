"""Build the working context with the latest compaction record applied (pure).

This is the one entry point the actor calls for every request:

1. ``load_from_seq(record)`` says which events to load (``None``: the whole session,
   or whatever window the caller chose);
2. ``build_compacted_context(events, record=..., ...)`` maps them to messages.

``compaction`` events are never messages. With a summarize record (or a compact record
carrying summarize ``memory``) events before ``tail_start_seq`` are dropped and the
memory block is appended to the system instructions; with a compact record, tool
payloads of events with ``seq < boundary_seq`` become placeholders (see
``placeholders``). Tool results whose call is not in the window are dropped (no provider
accepts them; they stay in storage), and the tool pairing is repaired
(``values.repair.repair_tool_pairing``: synthetic results for calls that never got one,
late results moved to their call, reused call ids made unique), so every stored history
builds a context every adapter renders. The output depends only on the events and the
record, so the messages for a given prefix of events are identical from one request to
the next until a new record is written: provider prompt caches keep working.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..values.codec import event_to_message
from ..values.context import WorkingContext
from ..values.events import ContextMessage, SessionEvent
from ..values.recent import ViewMessages
from ..values.records import record_memory
from ..values.repair import needs_repair, repair_tool_pairing
from ..values.tokens import MESSAGE_OVERHEAD, count_messages, get_counter
from ..values.turns import drop_orphan_results
from .config import StrategyConfig
from .memory import memory_block
from .placeholders import PlaceholderParams, call_name_index, compact_message

__all__ = ["BuiltContext", "build_compacted_context", "build_parts", "load_from_seq"]


@dataclass(frozen=True)
class BuiltContext:
    """Messages and extra system instructions (the memory block) for a record.

    ``stored_tokens`` is the messages' token count taken from the events' stored
    ``token_count`` (messages a placeholder changed are counted afresh); ``None`` when
    an event has no stored count.
    """

    system_extra: list[str]
    messages: list[ContextMessage]
    placeholders: int
    stored_tokens: int | None = None

    def token_count(self, system_instructions: Iterable[str] = (), model: str | None = None) -> int:
        """Tokens of the messages plus ``system_instructions`` and the memory block.

        Uses ``stored_tokens`` when known (no re-tokenising of unchanged messages).
        """
        system = [*system_instructions, *self.system_extra]
        if self.stored_tokens is None:
            return count_messages(self.messages, system, model=model).tokens
        counter = get_counter(model)
        return self.stored_tokens + sum(
            MESSAGE_OVERHEAD + counter.count_instruction(s) for s in system
        )


def load_from_seq(record: Mapping[str, Any] | None) -> int | None:
    """The first seq the builder needs: ``tail_start_seq`` of the record's memory.

    ``None`` means no lower bound (no record, or a compact record without memory: its
    placeholders replace payloads but every message stays).
    """
    memory = record_memory(record)
    return None if memory is None else int(memory["tail_start_seq"])


def build_parts(
    events: Sequence[SessionEvent],
    record: Mapping[str, Any] | None,
    *,
    messages: ViewMessages | None = None,
    max_episodic_items: int = 3,
    max_semantic_items: int = 20,
    model: str | None = None,
) -> BuiltContext:
    """The messages (placeholders applied) and memory block for ``events`` and ``record``.

    ``messages``, when given, are the recent cache's for ``events`` (each event converted
    once, the totals kept as events arrive); otherwise the shown events are converted
    here. ``model`` picks the encoding used to count messages a placeholder changed.
    """
    extra: list[str] = []
    memory = record_memory(record)
    tail_start: int | None = None
    if memory is not None:
        tail_start = memory["tail_start_seq"]
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
    evs: Sequence[SessionEvent]
    msgs: list[ContextMessage] | None = None
    total: int | None = None
    clean = False  # the cache found that ``msgs`` need no repair
    if messages is None:
        # Converted below, only the events the context shows (the orphan filter first
        # under placeholders).
        evs = [
            e
            for e in events
            if e.action != "compaction" and (tail_start is None or e.seq >= tail_start)
        ]
    elif messages.plain and (tail_start is None or messages.first_seq >= tail_start):
        # Every event is shown: what ``_shown`` would find, the cache has already.
        msgs = cast(list[ContextMessage], list(messages.messages))  # the view's is shared
        evs, total, clean = events, messages.tokens, messages.clean
    else:
        evs, msgs, total = _shown(events, messages.messages, tail_start)
    if params is None:
        if msgs is None:
            msgs, total = _converted(evs)
        # The common case: nothing to repair (``needs_repair``: every result follows its
        # call in its group, so none is an orphan either).
        if clean or not needs_repair(msgs):
            return BuiltContext(extra, msgs, 0, total)
    # The cache's messages by event identity, for the events the orphan filter keeps.
    message_of = None if messages is None else dict(zip(map(id, evs), msgs or (), strict=True))
    evs = drop_orphan_results(evs)
    names = call_name_index(evs) if params is not None else {}
    mapped: list[ContextMessage] = []
    turns: list[int | None] = []  # the stored turn of each message's event
    # Token count of each message by identity (None: the event has no stored count);
    # messages a placeholder changed are counted afresh, and so are the ones the repair
    # below makes up or changes (they are not in this map).
    known: dict[int, int | None] = {}
    removed = 0
    counter = None
    for ev in evs:
        msg = event_to_message(ev) if message_of is None else message_of[id(ev)]
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
        mapped.append(msg)
        turns.append(ev.turn)
    # ``mapped`` stays referenced (a local lives until the return): the ids in ``known``
    # cannot be reused by the messages the repair makes.
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


def _shown(
    events: Sequence[SessionEvent],
    messages: Sequence[ContextMessage | None],
    tail_start: int | None,
) -> tuple[list[SessionEvent], list[ContextMessage], int | None]:
    """The events a context shows (no ``compaction`` event, none before ``tail_start``,
    none without a message), their ``messages`` and the events' stored token total
    (``None`` when one has no count): one pass."""
    evs: list[SessionEvent] = []
    msgs: list[ContextMessage] = []
    total: int | None = 0
    for ev, msg in zip(events, messages, strict=True):
        if ev.action == "compaction" or (tail_start is not None and ev.seq < tail_start):
            continue
        if msg is None:
            continue
        evs.append(ev)
        msgs.append(msg)
        if total is not None:
            tokens = ev.token_count
            total = None if tokens is None else total + tokens
    return evs, msgs, total


def _converted(events: Sequence[SessionEvent]) -> tuple[list[ContextMessage], int | None]:
    """The messages of ``events`` (none for an event without one) and the events'
    stored token total (``None`` when one has no count)."""
    msgs: list[ContextMessage] = []
    total: int | None = 0
    for ev in events:
        msg = event_to_message(ev)
        if msg is None:
            continue
        msgs.append(msg)
        if total is not None:
            tokens = ev.token_count
            total = None if tokens is None else total + tokens
    return msgs, total


def build_compacted_context(
    events: Sequence[SessionEvent],
    *,
    record: Mapping[str, Any] | None,
    messages: ViewMessages | None = None,
    system_instructions: Iterable[str] | None = None,
    base_seq: int | None = None,
    config: StrategyConfig | None = None,
    metadata: dict[str, Any] | None = None,
    count_tokens: bool = False,
    model: str | None = None,
) -> WorkingContext:
    """The ``WorkingContext`` for ``events`` (oldest first) under ``record``.

    ``record`` is the latest compaction record (the ``compaction`` dict of the latest
    compaction event) or ``None``; it is honoured whatever ``config.mode`` is (the mode
    decides whether new compactions are planned, not whether old ones apply).
    ``config`` supplies ``max_episodic_items``/``max_semantic_items`` (defaults when
    ``None``). ``base_seq`` defaults to the highest seq among ``events``. With
    ``count_tokens`` the context's ``token_count`` is set (``model`` picks the encoding;
    stored per-event counts are used when every event has one). ``messages``: as for
    ``build_parts``. The memory block is the last system instruction, after ``system_instructions``.
    """
    cfg = config or StrategyConfig()
    parts = build_parts(
        events,
        record,
        messages=messages,
        max_episodic_items=cfg.max_episodic_items,
        max_semantic_items=cfg.max_semantic_items,
    )
    instructions = list(system_instructions or ())
    system = [*instructions, *parts.system_extra]
    if base_seq is None:
        base_seq = max((e.seq for e in events), default=0)
    meta = dict(metadata or {})
    if record is not None:
        meta["compaction"] = {
            "strategy": record.get("strategy"),
            "boundary_seq": record.get("boundary_seq"),
            "placeholders": parts.placeholders,
        }
    token_count = parts.token_count(instructions, model) if count_tokens else None
    return WorkingContext(system, parts.messages, meta, base_seq=base_seq, token_count=token_count)
