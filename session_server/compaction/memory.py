"""Episodic/semantic memory items and the memory block text (pure).

Items are plain JSON objects with exactly the reference field names (DESIGN §7), so the
mirror can write them to ``episodic.jsonl`` / ``semantic.jsonl`` unchanged:

- episodic: ``{id, ts, turn_ids, summary, tags, salience}`` (``id`` ``ep_0001``...)
- semantic: ``{id, ts, fact, tags, confidence, salience}`` (``id`` ``sem_0001``...)

``ts`` is epoch seconds (float). The memory block is deterministic text built from
them; it goes into the system instructions, so it only changes when a new compaction
record is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

__all__ = [
    "EPISODIC_HEADER",
    "RECENT_HEADER",
    "SEMANTIC_HEADER",
    "SemanticFact",
    "make_episodic_item",
    "memory_block",
    "merge_semantic",
    "select_episodic",
    "select_semantic",
    "turn_id",
]

EPISODIC_HEADER: Final = "[MEMORY:EPISODIC]"
SEMANTIC_HEADER: Final = "[MEMORY:SEMANTIC]"
RECENT_HEADER: Final = "[RECENT TURNS]"


class SemanticFact(msgspec.Struct, frozen=True):
    """One stable fact a summarizer extracted (``confidence`` in [0, 1])."""

    fact: str
    tags: list[str] = []
    confidence: float = 0.5


def turn_id(number: int) -> str:
    """The reference turn id of a turn number: ``turn_0001``."""
    return f"turn_{number:04d}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def make_episodic_item(
    index: int,
    *,
    ts: float,
    turn_ids: Sequence[str],
    summary: str,
    tags: Sequence[str],
    salience: float,
    sources: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """An episodic item; ``index`` is its 1-based position in the session's memory;
    ``sources`` the seq ranges of the raw events it summarises (omitted when none)."""
    item: dict[str, Any] = {
        "id": f"ep_{index:04d}",
        "ts": ts,
        "turn_ids": list(turn_ids),
        "summary": summary,
        "tags": list(tags),
        "salience": salience,
    }
    if sources:
        item["sources"] = [dict(s) for s in sources]
    return item


def merge_semantic(
    existing: Sequence[Mapping[str, Any]],
    facts: Sequence[SemanticFact],
    *,
    ts: float,
    sources: Sequence[Mapping[str, Any]] = (),
) -> tuple[list[dict[str, Any]], list[str]]:
    """Existing items plus new facts, deduplicated by fact text; and the ids added.

    Fact text is compared after collapsing whitespace. A repeated fact keeps its id,
    position and ``ts``; its tags become the union and its confidence (and salience) the
    higher of the two. A new fact gets the next ``sem_NNNN`` id, ``salience`` equal to
    its confidence. ``sources`` (seq ranges of the raw events the facts came from) are
    recorded on new facts and added to a repeated fact's.
    """
    merged = [dict(item) for item in existing]
    by_text = {_one_line(str(item.get("fact", ""))): item for item in merged}
    added: list[str] = []
    next_index = len(merged) + 1
    for fact in facts:
        text = _one_line(fact.fact)
        if not text:
            continue
        seen = by_text.get(text)
        if seen is not None:
            tags = list(seen.get("tags") or [])
            seen["tags"] = tags + [t for t in fact.tags if t not in tags]
            if sources:
                known = list(seen.get("sources") or [])
                seen["sources"] = known + [dict(s) for s in sources if s not in known]
            if fact.confidence > float(seen.get("confidence", 0.0)):
                seen["confidence"] = fact.confidence
                seen["salience"] = max(float(seen.get("salience", 0.0)), fact.confidence)
            continue
        item_id = f"sem_{next_index:04d}"
        item: dict[str, Any] = {
            "id": item_id,
            "ts": ts,
            "fact": text,
            "tags": list(dict.fromkeys(fact.tags)),
            "confidence": fact.confidence,
            "salience": fact.confidence,
        }
        if sources:
            item["sources"] = [dict(s) for s in sources]
        next_index += 1
        merged.append(item)
        by_text[text] = item
        added.append(item_id)
    return merged, added


def select_episodic(items: Sequence[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    """The ``limit`` most recent episodic items, oldest first."""
    return list(items[-limit:]) if limit > 0 else []


def select_semantic(items: Sequence[Mapping[str, Any]], limit: int) -> list[Mapping[str, Any]]:
    """The ``limit`` most salient semantic items (ties: earlier first), in stored order."""
    if limit <= 0:
        return []
    ranked = sorted(range(len(items)), key=lambda i: (-float(items[i].get("salience", 0.0)), i))
    keep = sorted(ranked[:limit])
    return [items[i] for i in keep]


def memory_block(
    episodic: Sequence[Mapping[str, Any]],
    semantic: Sequence[Mapping[str, Any]],
    *,
    max_episodic_items: int,
    max_semantic_items: int,
    tail_start_turn: int | None = None,
) -> str:
    """The memory block placed in the system instructions after a summarize compaction.

    ::

        [MEMORY:EPISODIC]
        1) <summary>

        [MEMORY:SEMANTIC]
        - <fact>

        [RECENT TURNS]
        The conversation continues below from turn_0005.

    An empty section is left out; ``[RECENT TURNS]`` is always last. Each item is one
    line (whitespace collapsed).
    """
    sections: list[str] = []
    shown_ep = select_episodic(episodic, max_episodic_items)
    if shown_ep:
        lines = [
            f"{i}) {_one_line(str(item.get('summary', '')))}" for i, item in enumerate(shown_ep, 1)
        ]
        sections.append("\n".join([EPISODIC_HEADER, *lines]))
    shown_sem = select_semantic(semantic, max_semantic_items)
    if shown_sem:
        lines = [f"- {_one_line(str(item.get('fact', '')))}" for item in shown_sem]
        sections.append("\n".join([SEMANTIC_HEADER, *lines]))
    if tail_start_turn is None:
        recent = "The conversation continues below."
    else:
        recent = f"The conversation continues below from {turn_id(tail_start_turn)}."
    sections.append(f"{RECENT_HEADER}\n{recent}")
    return "\n\n".join(sections)
