"""Plan a placeholder (``compact``) compaction (pure).

``plan_compact`` decides whether a new compact record is due and returns it inside a
``CompactionPlan``. The boundary is the first event of the oldest of the last
``compact_keep`` user turns (moved to an earlier turn start if it would split a tool call
from its result); everything before it is subject to placeholders. A new record is only
produced when a trigger fired (or ``force``) AND the boundary moves forward AND the move
replaces at least one more payload, so the rendered prefix stays byte-identical between
compactions. ``force`` (an explicit ``memory.compact``) also writes a record when the
placeholder parameters changed, even if the boundary does not move.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..values.codec import now_ms as _now_ms
from ..values.events import SessionEvent
from ..values.records import record_memory
from .builder import BuiltContext, build_parts
from .config import COMPACT_PARAM_NAMES, StrategyConfig
from .records import RECORD_VERSION, CompactionPlan
from .triggers import check_compact_triggers, needs_token_count
from .window import safe_cuts, uncompacted_turns

__all__ = ["plan_compact"]


def _noop(reason: str, tokens: int | None = None) -> CompactionPlan:
    return CompactionPlan("compact", None, reason, tokens_before=tokens, tokens_after=tokens)


def _same_params(previous: Mapping[str, Any] | None, config: StrategyConfig) -> bool:
    if previous is None or previous.get("strategy") != "compact":
        return False
    old = previous.get("params") or {}
    new = config.to_dict()
    return all(old.get(k) == new[k] for k in COMPACT_PARAM_NAMES)


def plan_compact(
    events: Sequence[SessionEvent],
    config: StrategyConfig,
    *,
    previous_record: Mapping[str, Any] | None = None,
    force: bool = False,
    pressure: bool = False,
    system_instructions: Iterable[str] = (),
    token_count: int | None = None,
    model: str | None = None,
    now_ms: int | None = None,
) -> CompactionPlan:
    """Plan a compact record for ``events`` (the loaded window, oldest first).

    ``previous_record`` is the latest record (or ``None``). ``pressure`` is the
    token-pressure flag from provider usage. ``token_count`` is the current context's
    token count when the caller knows it; otherwise it is counted (with
    ``system_instructions``, ``model``'s encoding) when a token trigger is active.
    Returns a plan whose ``record`` is ``None`` with a ``reason`` when there is nothing
    to do. A summarize ``memory`` in the previous record is carried into the new one.
    """
    memory = record_memory(previous_record)
    evs, turns, starts = uncompacted_turns(events, memory)
    keep = config.compact_keep
    if len(starts) <= keep:
        return _noop(
            f"nothing to compact: {len(starts)} turn(s) and compact_keep={keep} keeps them all"
        )
    if keep == 0:
        boundary_idx = len(evs)
        boundary_seq = evs[-1].seq + 1
        boundary_turn = turns[-1] + 1
    else:
        cuts = safe_cuts(evs)
        safe = [(t, i) for t, i in starts[: len(starts) - keep + 1] if cuts[i]]
        if not safe:
            return _noop("nothing to compact: every turn boundary splits a tool call")
        boundary_turn, boundary_idx = safe[-1]
        boundary_seq = evs[boundary_idx].seq
    prev_boundary = 0
    if previous_record is not None and previous_record.get("strategy") == "compact":
        prev_boundary = int(previous_record.get("boundary_seq", 0))

    system = list(system_instructions)

    def tokens_of(parts: BuiltContext) -> int:
        return parts.token_count(system, model)

    before = build_parts(
        evs,
        previous_record,
        max_episodic_items=config.max_episodic_items,
        max_semantic_items=config.max_semantic_items,
        model=model,
    )
    tokens_before = token_count
    if tokens_before is None and needs_token_count(config):
        tokens_before = tokens_of(before)
    turns_since = sum(1 for _, i in starts if evs[i].seq >= prev_boundary)
    check = check_compact_triggers(
        config, turns_since_boundary=turns_since, context_tokens=tokens_before, pressure=pressure
    )
    if not check.fired and not force:
        return _noop(f"no compact trigger fired ({check.detail})", tokens_before)
    same = _same_params(previous_record, config)
    if boundary_seq <= prev_boundary and (same or not force):
        return _noop(
            f"boundary would not move (seq {boundary_seq}, current boundary {prev_boundary})",
            tokens_before,
        )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "strategy": "compact",
        "params": config.to_dict(),
        "boundary_seq": boundary_seq,
        "boundary_turn": boundary_turn,
        "triggers": list(check.fired) or ["explicit"],
        "created_at": _now_ms() if now_ms is None else now_ms,
    }
    if memory is not None:
        record["memory"] = memory
    after = build_parts(
        evs,
        record,
        max_episodic_items=config.max_episodic_items,
        max_semantic_items=config.max_semantic_items,
        model=model,
    )
    if after.placeholders == 0:
        return _noop(
            f"nothing to compact: no selected tool payload before seq {boundary_seq}",
            tokens_before,
        )
    new_items = after.placeholders - before.placeholders
    if new_items <= 0 and same:
        return _noop(
            f"nothing new to compact before seq {boundary_seq} "
            f"({after.placeholders} payload(s) already replaced)",
            tokens_before,
        )
    if tokens_before is None:
        tokens_before = tokens_of(before)
    tokens_after = tokens_of(after)
    low = prev_boundary if same else 0
    count = sum(1 for e in evs if low <= e.seq < boundary_seq)
    record.update(
        removed_items=after.placeholders,
        new_items=max(new_items, 0),
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
    return CompactionPlan(
        "compact",
        record,
        f"compacted {max(new_items, 0)} payload(s) before seq {boundary_seq} "
        f"(triggers: {', '.join(record['triggers'])})",
        event_count=count,
        items_removed=max(new_items, 0),
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
