"""When to compact: compact triggers and provider-usage token pressure (pure).

Token pressure (DESIGN §6, seed 000 §10): ``input_budget = max_context_tokens -
max_output_tokens - safety_margin_tokens``; compaction is required when the provider
reported ``prompt_tokens > compaction_ratio * input_budget`` for the last response.

Compact triggers are evaluated on the context as it would be built now (the latest
compaction record applied), so after a compaction they measure what is left:

- ``compact_trigger_turns``: more than this many user turns at or after the current
  compaction boundary (the whole session before the first compaction);
- ``token_budget`` / ``token_soft_budget``: more tokens than the budget;
- ``token_remaining_pct`` / ``token_soft_remaining_pct``: less than this fraction of
  ``context_window_tokens`` left (``token_remaining_pct`` is 0.2 when no trigger is set);
- ``token_pressure``: the flag computed from provider usage (see above).

Soft thresholds fire like hard ones; the record names which fired, so an operator can
tell early compactions from forced ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..core.errors import InvalidParamsError
from .config import StrategyConfig, effective_remaining_pct

__all__ = [
    "TokenPressure",
    "TriggerCheck",
    "check_compact_triggers",
    "compaction_required",
    "input_budget",
    "needs_token_count",
    "token_pressure",
]


class TokenPressure(NamedTuple):
    """The token-pressure verdict for one provider response."""

    prompt_tokens: int | None
    input_budget: int
    threshold: float
    required: bool


class TriggerCheck(NamedTuple):
    """Which compact triggers fired (empty: none) and a readable account of the inputs."""

    fired: tuple[str, ...]
    detail: str


def input_budget(config: StrategyConfig) -> int:
    """``max_context_tokens - max_output_tokens - safety_margin_tokens`` (always > 0)."""
    return config.max_context_tokens - config.max_output_tokens - config.safety_margin_tokens


def _usage_int(usage: Mapping[str, Any], key: str) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParamsError(
            f"usage.{key}: must be a non-negative integer, got {value!r}",
            data={"field": f"usage.{key}"},
        )
    return value


def token_pressure(usage: Mapping[str, Any] | None, config: StrategyConfig) -> TokenPressure:
    """Evaluate provider usage (``prompt_tokens``, ``completion_tokens``) against the budget.

    ``input_tokens`` (the Responses/Anthropic name) is read when ``prompt_tokens`` is
    absent. No usage, or usage without a prompt count, never requires compaction. Raises
    ``InvalidParamsError`` naming the key when a count is not a non-negative integer.
    """
    budget = input_budget(config)
    threshold = config.compaction_ratio * budget
    if usage is None:
        return TokenPressure(None, budget, threshold, False)
    if not isinstance(usage, Mapping):
        raise InvalidParamsError(
            f"usage: must be an object, got {type(usage).__name__}", data={"field": "usage"}
        )
    prompt = _usage_int(usage, "prompt_tokens")
    if prompt is None:
        prompt = _usage_int(usage, "input_tokens")
    _usage_int(usage, "completion_tokens")  # validated, not used by the rule
    required = prompt is not None and prompt > threshold
    return TokenPressure(prompt, budget, threshold, required)


def compaction_required(usage: Mapping[str, Any] | None, config: StrategyConfig) -> bool:
    """``prompt_tokens > compaction_ratio * input_budget`` (see ``token_pressure``)."""
    return token_pressure(usage, config).required


def needs_token_count(config: StrategyConfig) -> bool:
    """Whether any token-based compact trigger is active (else counting can be skipped)."""
    return any(
        v is not None
        for v in (
            config.token_budget,
            config.token_soft_budget,
            effective_remaining_pct(config),
            config.token_soft_remaining_pct,
        )
    )


def check_compact_triggers(
    config: StrategyConfig,
    *,
    turns_since_boundary: int,
    context_tokens: int | None,
    pressure: bool = False,
) -> TriggerCheck:
    """Evaluate every compact trigger; token triggers are skipped when the count is None."""
    fired: list[str] = []
    parts = [f"turns={turns_since_boundary}", f"tokens={context_tokens}"]
    if config.compact_trigger_turns is not None and turns_since_boundary > (
        config.compact_trigger_turns
    ):
        fired.append("compact_trigger_turns")
    if context_tokens is not None:
        window = config.context_window_tokens
        remaining = (window - context_tokens) / window
        parts.append(f"remaining={remaining:.3f}")
        if config.token_budget is not None and context_tokens > config.token_budget:
            fired.append("token_budget")
        if config.token_soft_budget is not None and context_tokens > config.token_soft_budget:
            fired.append("token_soft_budget")
        pct = effective_remaining_pct(config)
        if pct is not None and remaining < pct:
            fired.append("token_remaining_pct")
        soft_pct = config.token_soft_remaining_pct
        if soft_pct is not None and remaining < soft_pct:
            fired.append("token_soft_remaining_pct")
    if pressure:
        fired.append("token_pressure")
    return TriggerCheck(tuple(fired), ", ".join(parts))
