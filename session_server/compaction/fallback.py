"""Placeholders while a summary cannot be had: the fallback record (pure).

Under ``summarize`` a build that finds a summary due waits for it a bounded time. When
the summarizer is slow (still running after the wait), failed, timed out, or is backing
off after a failure, the build cannot have the new summary. If the effective strategy
sets placeholder parameters (any of ``COMPACT_PARAM_NAMES`` at any level: request,
session, agent or server), the build then applies a fresh compact record over the
current history, so old tool payloads become placeholders and the prompt stays bounded
without the summarizer. Without such parameters the previous record applies as it is.

The fallback is an ordinary compact record (``plan_compact`` under token pressure, the
trigger the due summary acted on) with one more key, ``fallback``: ``{"for":
"summarize", "cause": "slow" | "failed"}``. It carries the previous summary's memory, if
any. The caller writes it as a ``compaction`` event (so every later build, and every
reader, sees the same bytes) and leaves the session's pressure flag set, so the summary
is still retried; once written, the summary's record is the latest and supersedes it. A
second fallback over the same history plans nothing (the boundary does not move).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

from ..values.events import SessionEvent
from .compact import plan_compact
from .config import COMPACT_PARAM_NAMES, StrategyConfig
from .records import CompactionPlan

__all__ = ["FallbackCause", "plan_placeholder_fallback", "sets_placeholders"]

FallbackCause = Literal["slow", "failed"]


def sets_placeholders(config: StrategyConfig) -> bool:
    """Whether a summary that cannot be had falls back to placeholders: the strategy is
    ``summarize`` and some level set a placeholder parameter (``COMPACT_PARAM_NAMES``)."""
    return config.mode == "summarize" and not config.model_fields_set.isdisjoint(
        COMPACT_PARAM_NAMES
    )


def plan_placeholder_fallback(
    events: Sequence[SessionEvent],
    config: StrategyConfig,
    *,
    cause: FallbackCause,
    previous_record: Mapping[str, Any] | None,
    system_instructions: Iterable[str] = (),
    model: str | None = None,
    now_ms: int | None = None,
) -> CompactionPlan:
    """The compact record to apply while the summary is ``cause`` (``slow`` or
    ``failed``), or a plan without record (``reason`` says why): the strategy sets no
    placeholder parameter, or the placeholders in place already cover the history."""
    if not sets_placeholders(config):
        return CompactionPlan(
            "compact", None, "no placeholder fallback: the strategy sets no compact_* parameter"
        )
    plan = plan_compact(
        events,
        config,
        previous_record=previous_record,
        pressure=True,
        system_instructions=system_instructions,
        model=model,
        now_ms=now_ms,
    )
    if plan.record is None:
        return plan
    record = {**plan.record, "fallback": {"for": "summarize", "cause": cause}}
    return replace(plan, record=record, reason=f"summary {cause}: {plan.reason}")
