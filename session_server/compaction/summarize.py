"""Plan a ``summarize`` compaction and make its record from a summary (pure).

1. ``plan_summarize(events, config, previous_record=...)`` selects the window: whole
   turns older than the last ``raw_tail_turns`` user turns (and newer than the previous
   summarize record's tail), moved earlier when a covered turn holds a tool call whose
   result is not there yet. It returns a ``SummaryRequest`` (with the previous memory,
   so a second summary builds on the first) or a reason why there is nothing to do.
2. A ``Summarizer`` turns the request into a ``SummaryResult`` (I/O, see ``summarizers``).
3. ``make_summary_record(request, result, config)`` returns the record: the
   accumulated memory (all episodic items, semantic facts merged by fact text), the
   covered ``turn_ids``/``seq_range`` and ``tail_start_seq``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..values.codec import arguments_text, encode_json
from ..values.codec import now_ms as _now_ms
from ..values.errors import SummarizerError
from ..values.events import SessionEvent
from ..values.records import record_memory
from .config import StrategyConfig
from .memory import SemanticFact, make_episodic_item, merge_semantic, turn_id
from .records import RECORD_VERSION
from .window import uncompacted_turns

__all__ = [
    "SummaryPlan",
    "SummaryRequest",
    "SummaryResult",
    "SummaryTurn",
    "make_summary_record",
    "plan_summarize",
    "render_transcript",
]


class SummaryTurn(msgspec.Struct, frozen=True):
    """One whole turn to summarise (``turn_id`` like ``turn_0003``)."""

    turn_id: str
    number: int
    events: list[SessionEvent]


class SummaryRequest(msgspec.Struct, frozen=True):
    """What a summarizer gets: the turns to cover and the memory accumulated so far."""

    turns: list[SummaryTurn]
    previous_episodic: list[dict[str, Any]]
    previous_semantic: list[dict[str, Any]]
    turn_ids: list[str]
    seq_range: list[int]
    tail_start_seq: int
    tail_start_turn: int
    event_count: int
    max_semantic_items: int = 20


class SummaryResult(msgspec.Struct, frozen=True):
    """A summarizer's answer: one episodic summary and semantic facts."""

    summary: str
    facts: list[SemanticFact] = []
    tags: list[str] = []
    salience: float = 0.5


@dataclass(frozen=True)
class SummaryPlan:
    """``request`` to summarise, or ``None`` with the ``reason`` there is nothing to do."""

    request: SummaryRequest | None
    reason: str


def _pending_turns(events: Sequence[SessionEvent], turns: Sequence[int], before: int) -> list[int]:
    """Turns (< before) holding a tool call whose result is not among ``events``."""
    answered = {e.tool_call_id for e in events if e.action == "tool_result"}
    return [
        t
        for e, t in zip(events, turns, strict=True)
        if t < before
        and e.action == "tool_call_request"
        and any(c.id not in answered for c in e.tool_calls or ())
    ]


def plan_summarize(
    events: Sequence[SessionEvent],
    config: StrategyConfig,
    *,
    previous_record: Mapping[str, Any] | None = None,
) -> SummaryPlan:
    """Select the turns to summarise from ``events`` (the loaded window, oldest first).

    Covered: every event whose turn is older than the first of the last
    ``raw_tail_turns`` user turns, including results that arrived after a later user
    message (they keep their call's turn), and events before the first user message.
    ``tail_start_seq`` is the seq of the user message starting the tail.
    """
    memory = record_memory(previous_record)
    evs, turns, starts = uncompacted_turns(events, memory)
    tail = config.raw_tail_turns
    if len(starts) <= tail:
        return SummaryPlan(
            None,
            f"nothing to summarise: {len(starts)} turn(s) and raw_tail_turns={tail} keeps them all",
        )
    if tail > 0:
        tail_turn, tail_idx = starts[len(starts) - tail]
    else:
        tail_turn, tail_idx = turns[-1] + 1, len(evs)
    pending = _pending_turns(evs, turns, tail_turn)
    if pending:
        tail_turn = min(pending)
        tail_idx = next((i for t, i in starts if t == tail_turn), len(evs))
    covered_idx = [i for i, t in enumerate(turns) if t < tail_turn]
    if not covered_idx or (memory is not None and tail_turn <= memory["tail_start_turn"]):
        return SummaryPlan(None, "nothing to summarise: no whole turn is older than the tail")
    tail_start_seq = evs[tail_idx].seq if tail_idx < len(evs) else evs[-1].seq + 1
    grouped: dict[int, list[SessionEvent]] = {}
    for i in covered_idx:
        grouped.setdefault(turns[i], []).append(evs[i])
    summary_turns = [SummaryTurn(turn_id(n), n, grouped[n]) for n in sorted(grouped)]
    covered_seqs = [evs[i].seq for i in covered_idx]
    request = SummaryRequest(
        turns=summary_turns,
        previous_episodic=list(memory["episodic"]) if memory else [],
        previous_semantic=list(memory["semantic"]) if memory else [],
        turn_ids=[t.turn_id for t in summary_turns],
        seq_range=[min(covered_seqs), max(covered_seqs)],
        tail_start_seq=tail_start_seq,
        tail_start_turn=tail_turn,
        event_count=len(covered_idx),
        max_semantic_items=config.max_semantic_items,
    )
    return SummaryPlan(request, f"summarising {len(summary_turns)} turn(s)")


def _check_result(result: SummaryResult) -> None:
    if not isinstance(result, SummaryResult):
        raise SummarizerError(
            f"summarizer returned {type(result).__name__}, expected SummaryResult"
        )
    if not result.summary.strip():
        raise SummarizerError("summarizer result: 'summary' is empty")
    for i, fact in enumerate(result.facts):
        if not 0.0 <= fact.confidence <= 1.0:
            raise SummarizerError(
                f"summarizer result: facts[{i}].confidence must be in [0, 1], "
                f"got {fact.confidence!r}"
            )


def summary_sources(request: SummaryRequest) -> list[dict[str, Any]]:
    """Where a summary came from: ``[{session_id, from_seq, to_seq}]``, the seq range of
    the raw events it covers (``memory.expand`` reads them back)."""
    session_id = next((e.session_id for t in request.turns for e in t.events), None)
    if session_id is None or len(request.seq_range) != 2:
        return []
    return [
        {"session_id": session_id, "from_seq": request.seq_range[0], "to_seq": request.seq_range[1]}
    ]


def make_summary_record(
    request: SummaryRequest,
    result: SummaryResult,
    config: StrategyConfig,
    *,
    summarizer: str = "",
    triggers: Sequence[str] = ("explicit",),
    tokens_before: int | None = None,
    tokens_after: int | None = None,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """The summarize record: accumulated memory plus this compaction's window.

    Raises ``SummarizerError`` when ``result`` is unusable (empty summary, confidence
    out of range). The record is JSON-serialisable.
    """
    _check_result(result)
    created = _now_ms() if now_ms is None else now_ms
    ts = created / 1000.0
    sources = summary_sources(request)
    episode = make_episodic_item(
        len(request.previous_episodic) + 1,
        ts=ts,
        turn_ids=request.turn_ids,
        summary=" ".join(result.summary.split()),
        tags=list(dict.fromkeys(result.tags)),
        salience=result.salience,
        sources=sources,
    )
    semantic, added = merge_semantic(
        request.previous_semantic, result.facts, ts=ts, sources=sources
    )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "strategy": "summarize",
        "params": config.to_dict(),
        "boundary_seq": request.tail_start_seq,
        "boundary_turn": request.tail_start_turn,
        "tail_start_seq": request.tail_start_seq,
        "tail_start_turn": request.tail_start_turn,
        "turn_ids": list(request.turn_ids),
        "seq_range": list(request.seq_range),
        "episodic": [*request.previous_episodic, episode],
        "semantic": semantic,
        "added": {"episodic": [episode["id"]], "semantic": added},
        "summarizer": summarizer,
        "triggers": list(triggers),
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
        "created_at": created,
    }
    encode_json(record)  # fails loudly here, not in the store, if not serialisable
    return record


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[{len(text) - limit} more chars]"


def render_transcript(request: SummaryRequest, *, max_chars: int = 2000) -> str:
    """The covered turns as readable text (each payload clipped to ``max_chars``)."""
    lines: list[str] = []
    for turn in request.turns:
        lines.append(f"{turn.turn_id}:")
        for ev in turn.events:
            if ev.action == "user_message":
                lines.append(f"  User: {_clip(ev.content, max_chars)}")
            elif ev.action == "agent_message":
                lines.append(f"  Assistant: {_clip(ev.content, max_chars)}")
            elif ev.action == "system_instruction":
                lines.append(f"  System: {_clip(ev.content, max_chars)}")
            elif ev.action == "tool_call_request":
                if ev.content:
                    lines.append(f"  Assistant: {_clip(ev.content, max_chars)}")
                for call in ev.tool_calls or ():
                    args = _clip(arguments_text(call.arguments), max_chars)
                    lines.append(f"  Tool call {call.name} (call_id={call.id}): {args}")
            elif ev.action == "tool_result":
                kind = "Tool error" if ev.is_success is False else "Tool result"
                name = ev.tool_name or "unknown"
                lines.append(
                    f"  {kind} {name} (call_id={ev.tool_call_id}): {_clip(ev.content, max_chars)}"
                )
    return "\n".join(lines)
