"""When to compact: compact triggers and provider-usage token pressure (pure).

Token pressure (DESIGN §6, seed 000 §10): ``input_budget = max_context_tokens -
max_output_tokens - safety_margin_tokens``; compaction is required when the prompt of the
last response exceeded ``compaction_ratio * input_budget``. The prompt size is read from
the provider's usage in every shape (``usage_prompt_tokens``), and without one from the
server's own token count of the context, so the trigger always has a number to go on.

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

from ..values.errors import InvalidParamsError
from .config import StrategyConfig, effective_remaining_pct

__all__ = [
    "TokenPressure",
    "TriggerCheck",
    "check_compact_triggers",
    "compaction_required",
    "input_budget",
    "needs_token_count",
    "token_pressure",
    "usage_prompt_tokens",
]


class TokenPressure(NamedTuple):
    """The token-pressure verdict for one provider response; ``source`` says where the
    prompt size came from: ``usage``, ``server_count`` or ``none``."""

    prompt_tokens: int | None
    input_budget: int
    threshold: float
    required: bool
    source: str = "usage"


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


def usage_prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """The prompt size a provider's ``usage`` reports, whatever its shape.

    OpenAI Chat Completions: ``prompt_tokens``. OpenAI Responses: ``input_tokens`` (it
    includes cached tokens). Anthropic: ``input_tokens + cache_read_input_tokens +
    cache_creation_input_tokens`` (its ``input_tokens`` counts only the uncached part).
    ``None`` when none of these keys is present. Raises ``InvalidParamsError`` naming the
    key when a count is not a non-negative integer.
    """
    prompt = _usage_int(usage, "prompt_tokens")
    if prompt is not None:
        return prompt
    parts = [
        _usage_int(usage, key)
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ]
    if all(p is None for p in parts):
        return None
    return sum(p or 0 for p in parts)


def token_pressure(
    usage: Mapping[str, Any] | None,
    config: StrategyConfig,
    *,
    context_tokens: int | None = None,
) -> TokenPressure:
    """Evaluate the last prompt's size against the budget.

    The size is the provider's (``usage_prompt_tokens``); without usage, or usage without
    a prompt count, it is ``context_tokens`` (the server's own count of the context),
    when given. Raises ``InvalidParamsError`` naming the key when a count is not a
    non-negative integer.
    """
    budget = input_budget(config)
    threshold = config.compaction_ratio * budget
    prompt: int | None = None
    if usage is not None:
        if not isinstance(usage, Mapping):
            raise InvalidParamsError(
                f"usage: must be an object, got {type(usage).__name__}", data={"field": "usage"}
            )
        prompt = usage_prompt_tokens(usage)
        _usage_int(usage, "completion_tokens")  # validated, not used by the rule
    source = "usage"
    if prompt is None:
        prompt, source = context_tokens, "server_count" if context_tokens is not None else "none"
    required = prompt is not None and prompt > threshold
    return TokenPressure(prompt, budget, threshold, required, source)


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
