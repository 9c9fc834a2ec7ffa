"""Parse a model's JSON answer into a ``SummaryResult`` (pure, strict).

Expected shape::

    {"summary": "...", "tags": ["..."], "salience": 0.7,
     "facts": [{"fact": "...", "tags": ["..."], "confidence": 0.8}]}

``summary`` is required and non-empty; ``tags``, ``salience`` (default 0.5), ``facts``
(default []) and each fact's ``tags`` and ``confidence`` (default 0.5) are optional.
Numbers must lie in [0, 1]. Anything else raises ``SummarizerError`` naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from ..values.errors import SummarizerError
from .memory import SemanticFact
from .summarize import SummaryResult

__all__ = ["parse_summary_json"]


def _fail(message: str, field: str) -> SummarizerError:
    return SummarizerError(f"summarizer answer: {message}", data={"field": field})


def _tags(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _fail(f"'{field}' must be a list of strings, got {value!r}", field)
    return [t for t in value if t]


def _fraction(value: Any, field: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"'{field}' must be a number, got {value!r}", field)
    if not 0.0 <= float(value) <= 1.0:
        raise _fail(f"'{field}' must be between 0 and 1, got {value!r}", field)
    return float(value)


def parse_summary_json(text: str | None) -> SummaryResult:
    """Validate and convert the model's answer; raise ``SummarizerError`` when unusable."""
    if text is None or not text.strip():
        raise _fail("empty answer (expected a JSON object)", "content")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"not JSON ({exc.msg} at position {exc.pos})", "content") from exc
    if not isinstance(data, dict):
        raise _fail(f"expected a JSON object, got {type(data).__name__}", "content")
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        raise _fail(f"'summary' must be a non-empty string, got {summary!r}", "summary")
    raw_facts = data.get("facts", [])
    if raw_facts is None:
        raw_facts = []
    if not isinstance(raw_facts, list):
        raise _fail(f"'facts' must be a list, got {type(raw_facts).__name__}", "facts")
    facts: list[SemanticFact] = []
    for i, item in enumerate(raw_facts):
        where = f"facts[{i}]"
        if not isinstance(item, dict):
            raise _fail(f"'{where}' must be an object, got {item!r}", where)
        fact = item.get("fact")
        if not isinstance(fact, str) or not fact.strip():
            raise _fail(f"'{where}.fact' must be a non-empty string, got {fact!r}", where)
        facts.append(
            SemanticFact(
                fact=fact.strip(),
                tags=_tags(item.get("tags"), f"{where}.tags"),
                confidence=_fraction(item.get("confidence"), f"{where}.confidence", 0.5),
            )
        )
    return SummaryResult(
        summary=summary.strip(),
        facts=facts,
        tags=_tags(data.get("tags"), "tags"),
        salience=_fraction(data.get("salience"), "salience", 0.5),
    )
