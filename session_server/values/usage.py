"""Token usage, prices, costs and budgets as values (pure).

``normalise_usage`` turns a provider's ``usage`` object, in every shape the adapters know,
into one ``TurnUsage``:

- OpenAI Chat Completions and Workers AI: ``prompt_tokens``, ``completion_tokens``,
  ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``;
- OpenAI Responses (and the Agents SDK hook): ``input_tokens``, ``output_tokens``,
  ``input_tokens_details.cached_tokens`` (or a top-level ``cached_tokens``),
  ``output_tokens_details.reasoning_tokens``;
- Anthropic: ``input_tokens`` (the uncached part only), ``output_tokens``,
  ``cache_read_input_tokens``, ``cache_creation_input_tokens``;
- Gemini and Google ADK (``GenerateContentResponseUsageMetadata``, an ADK event's
  ``usage_metadata``; snake_case as the SDK dumps it, or camelCase as the REST API sends
  it): ``prompt_token_count`` (cached content included) plus ``tool_use_prompt_token_count``
  is the input, ``candidates_token_count`` plus ``thoughts_token_count`` the output,
  ``cached_content_token_count`` the cached part, ``thoughts_token_count`` the reasoning;
- this server's own shape (what ``memory.usage`` answers): ``input_tokens``,
  ``output_tokens``, ``cached_input_tokens``, ``cache_write_tokens``, ``reasoning_tokens``.

In a ``TurnUsage`` ``input_tokens`` is the whole prompt (cached reads and cache writes
included, as ``compaction.triggers.usage_prompt_tokens`` counts it) and
``output_tokens`` the whole output (reasoning included); ``cached_input_tokens``,
``cache_write_tokens`` and ``reasoning_tokens`` are parts of them.

Costs are computed from tokens and the operator's prices (``Prices``), never guessed: a
model without a price has no cost, and a total over such a model has none either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from .errors import InvalidParamsError

__all__ = [
    "USAGE_FIELDS",
    "Budget",
    "ModelPrice",
    "Prices",
    "UsageTotals",
    "budget_exceeded",
    "cost_of",
    "normalise_usage",
    "parse_budget",
    "parse_prices",
    "total_cost",
]

USAGE_FIELDS: Final = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
"""The stored token counts, in column order."""

MAX_TOKENS: Final = 2**53
"""A count above this is refused: no real turn comes close, and sums stay exact."""

MAX_MODEL_CHARS: Final = 256


class UsageTotals(msgspec.Struct, frozen=True):
    """Token counts of one turn, or the sum of many (``turns`` of them), for one model
    (``model`` ``None``: not given, or a sum over several)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    turns: int = 1
    model: str | None = None

    @property
    def total_tokens(self) -> int:
        """What a token budget counts: input plus output."""
        return self.input_tokens + self.output_tokens

    def counts(self) -> tuple[int, int, int, int, int]:
        """The five counts in ``USAGE_FIELDS`` order."""
        return (
            self.input_tokens,
            self.output_tokens,
            self.cached_input_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
        )

    def plus(self, other: UsageTotals) -> UsageTotals:
        """The sum of two totals (the model kept only when both have the same one)."""
        a, b = self.counts(), other.counts()
        return UsageTotals(
            a[0] + b[0],
            a[1] + b[1],
            a[2] + b[2],
            a[3] + b[3],
            a[4] + b[4],
            self.turns + other.turns,
            self.model if self.model == other.model else None,
        )


TurnUsage = UsageTotals
"""One turn's usage: ``UsageTotals`` with ``turns == 1``."""


def _count(usage: Mapping[str, Any], key: str, where: str = "usage") -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise InvalidParamsError(
            f"{where}.{key}: must be a non-negative integer, got {value!r}",
            data={"field": f"{where}.{key}"},
        )
    return value


def _detail(usage: Mapping[str, Any], key: str, inner: str) -> int | None:
    details = usage.get(key)
    if details is None:
        return None
    if not isinstance(details, Mapping):
        raise InvalidParamsError(
            f"usage.{key}: must be an object, got {type(details).__name__}",
            data={"field": f"usage.{key}"},
        )
    return _count(details, inner, f"usage.{key}")


def _first(*values: int | None) -> int:
    for value in values:
        if value is not None:
            return value
    return 0


def check_model(model: object) -> str | None:
    """``model`` as given (``None`` allowed); ``InvalidParamsError`` naming the field."""
    if model is None:
        return None
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_CHARS:
        raise InvalidParamsError(
            f"model: must be a non-empty string of at most {MAX_MODEL_CHARS} characters",
            data={"field": "model"},
        )
    return model


def normalise_usage(usage: Mapping[str, Any] | None, model: str | None = None) -> TurnUsage | None:
    """One turn's ``TurnUsage`` from a provider's ``usage`` (any known shape; see the module
    docstring); ``None`` when ``usage`` is ``None`` or holds no token count at all.
    ``model`` falls back to ``usage["model"]`` when that is a string. Raises
    ``InvalidParamsError`` naming the key of a count that is not a non-negative integer."""
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise InvalidParamsError(
            f"usage: must be an object, got {type(usage).__name__}", data={"field": "usage"}
        )
    model = check_model(model)
    if model is None and isinstance(usage.get("model"), str):
        model = check_model(usage["model"])
    gemini = _gemini(usage)
    if gemini is not None:
        return TurnUsage(*gemini, 1, model)
    prompt = _count(usage, "prompt_tokens")
    completion = _count(usage, "completion_tokens")
    input_ = _count(usage, "input_tokens")
    output = _count(usage, "output_tokens")
    cache_read = _count(usage, "cache_read_input_tokens")
    cache_creation = _count(usage, "cache_creation_input_tokens")
    own_cached = _count(usage, "cached_input_tokens")
    own_writes = _count(usage, "cache_write_tokens")
    top_cached = _count(usage, "cached_tokens")
    reasoning = _count(usage, "reasoning_tokens")
    chat_cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
    chat_reasoning = _detail(usage, "completion_tokens_details", "reasoning_tokens")
    resp_cached = _detail(usage, "input_tokens_details", "cached_tokens")
    resp_reasoning = _detail(usage, "output_tokens_details", "reasoning_tokens")
    if prompt is not None or completion is not None:  # Chat Completions, Workers AI
        total_in = _first(prompt, input_)
        total_out = _first(completion, output)
    elif cache_read is not None or cache_creation is not None:  # Anthropic
        total_in = (input_ or 0) + (cache_read or 0) + (cache_creation or 0)
        total_out = output or 0
    elif input_ is not None or output is not None:  # Responses, this server's shape
        total_in, total_out = input_ or 0, output or 0
    else:
        return None
    cached = _first(own_cached, cache_read, chat_cached, resp_cached, top_cached)
    writes = _first(own_writes, cache_creation)
    thought = _first(reasoning, chat_reasoning, resp_reasoning)
    if cached + writes > total_in:
        raise InvalidParamsError(
            f"usage: cached ({cached}) and cache-write ({writes}) tokens exceed the "
            f"input tokens ({total_in})",
            data={"field": "usage"},
        )
    if thought > total_out:
        raise InvalidParamsError(
            f"usage: reasoning tokens ({thought}) exceed the output tokens ({total_out})",
            data={"field": "usage"},
        )
    return TurnUsage(total_in, total_out, cached, writes, thought, 1, model)


GEMINI_FIELDS: Final = {
    "prompt_token_count": "promptTokenCount",
    "candidates_token_count": "candidatesTokenCount",
    "cached_content_token_count": "cachedContentTokenCount",
    "thoughts_token_count": "thoughtsTokenCount",
    "tool_use_prompt_token_count": "toolUsePromptTokenCount",
}
"""Gemini's usage counts (snake_case, as the SDK's ``model_dump``) and their REST names."""


def _gemini(usage: Mapping[str, Any]) -> tuple[int, int, int, int, int] | None:
    """The five counts of a Gemini/ADK ``usage_metadata``; ``None`` when it is another
    shape. Gemini's ``candidates_token_count`` leaves the thoughts out and its
    ``prompt_token_count`` holds the cached content; a ``TurnUsage`` counts reasoning in
    the output and tool-use prompts in the input."""
    counts: dict[str, int] = {}
    for snake, camel in GEMINI_FIELDS.items():
        key = snake if snake in usage else camel
        value = _count(usage, key)
        if value is not None:
            counts[snake] = value
    if "prompt_token_count" not in counts and "candidates_token_count" not in counts:
        return None
    prompt = counts.get("prompt_token_count", 0) + counts.get("tool_use_prompt_token_count", 0)
    thoughts = counts.get("thoughts_token_count", 0)
    output = counts.get("candidates_token_count", 0) + thoughts
    cached = counts.get("cached_content_token_count", 0)
    if cached > prompt:
        raise InvalidParamsError(
            f"usage: cached content tokens ({cached}) exceed the prompt tokens ({prompt})",
            data={"field": "usage.cached_content_token_count"},
        )
    if prompt + output > MAX_TOKENS:
        raise InvalidParamsError(f"usage: token counts over {MAX_TOKENS}", data={"field": "usage"})
    return prompt, output, cached, 0, thoughts


class ModelPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One model's prices in currency units per million tokens. ``cached_input`` and
    ``cache_write`` default to ``input`` (a provider without a cache discount)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def cost(self, usage: UsageTotals) -> float:
        """The cost of ``usage`` at these prices."""
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        uncached = max(0, usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens)
        return (
            uncached * self.input
            + usage.cached_input_tokens * cached_price
            + usage.cache_write_tokens * write_price
            + usage.output_tokens * self.output
        ) / 1_000_000


Prices = Mapping[str, ModelPrice]
"""Prices by model name (exact match)."""


def parse_prices(data: object, where: str = "prices") -> dict[str, ModelPrice]:
    """The operator's price table (``--prices FILE``, its JSON decoded): ``{model:
    {input, output, cached_input?, cache_write?}}``, every price a finite number >= 0.
    Raises ``ValueError`` naming the model and the field of the first wrong entry."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: must be a JSON object of models, got {type(data).__name__}")
    out: dict[str, ModelPrice] = {}
    fields = ("input", "output", "cached_input", "cache_write")
    for model, entry in data.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}: model {model!r}: must be an object of prices")
        for key in entry:
            if key not in fields:
                raise ValueError(
                    f"{where}: model {model!r}: unknown field {key!r} (known: {', '.join(fields)})"
                )
        for key in fields:
            value = entry.get(key)
            if value is None:
                if key in ("input", "output"):
                    raise ValueError(f"{where}: model {model!r}: field {key!r} is missing")
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"{where}: model {model!r}: field {key!r} must be a number >= 0 "
                    f"(per million tokens), got {value!r}"
                )
        out[str(model)] = ModelPrice(
            float(entry["input"]),
            float(entry["output"]),
            None if entry.get("cached_input") is None else float(entry["cached_input"]),
            None if entry.get("cache_write") is None else float(entry["cache_write"]),
        )
    return out


def cost_of(usage: UsageTotals, prices: Prices) -> float | None:
    """The cost of one model's usage; ``None`` when the model has no price."""
    if usage.model is None:
        return None
    price = prices.get(usage.model)
    return None if price is None else price.cost(usage)


def total_cost(by_model: Iterable[UsageTotals], prices: Prices) -> float | None:
    """The cost of usage given per model; ``None`` when any model with tokens is unpriced
    (a partial sum would pass for the whole)."""
    total = 0.0
    for usage in by_model:
        if usage.total_tokens == 0:
            continue
        cost = cost_of(usage, prices)
        if cost is None:
            return None
        total += cost
    return total


class Budget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A spending limit: tokens (input plus output) and/or cost (at the server's prices)."""

    max_total_tokens: int | None = None
    max_cost: float | None = None


def parse_budget(data: object, where: str = "budget") -> Budget | None:
    """A budget from JSON (``None`` or ``{}``: no budget); ``InvalidParamsError`` naming
    the field."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise InvalidParamsError(f"{where}: must be an object or null", data={"field": where})
    for key in data:
        if key not in ("max_total_tokens", "max_cost"):
            raise InvalidParamsError(
                f"{where}.{key}: unknown field (known: max_total_tokens, max_cost)",
                data={"field": f"{where}.{key}"},
            )
    tokens = data.get("max_total_tokens")
    if tokens is not None and (
        isinstance(tokens, bool) or not isinstance(tokens, int) or not 0 <= tokens <= MAX_TOKENS
    ):
        raise InvalidParamsError(
            f"{where}.max_total_tokens: must be an integer >= 0, got {tokens!r}",
            data={"field": f"{where}.max_total_tokens"},
        )
    cost = data.get("max_cost")
    if cost is not None and (
        isinstance(cost, bool)
        or not isinstance(cost, int | float)
        or not math.isfinite(cost)
        or cost < 0
    ):
        raise InvalidParamsError(
            f"{where}.max_cost: must be a number >= 0, got {cost!r}",
            data={"field": f"{where}.max_cost"},
        )
    if tokens is None and cost is None:
        return None
    return Budget(tokens, None if cost is None else float(cost))


def budget_exceeded(
    budget: Budget | None, by_model: Iterable[UsageTotals], prices: Prices
) -> str | None:
    """Which limit of ``budget`` the usage is past (``"max_total_tokens"`` or
    ``"max_cost"``), or ``None``. Past means strictly above: a budget of 1000 tokens
    allows 1000. A cost limit whose usage has no cost (an unpriced model) is not
    enforced: the cost is unknown, never guessed."""
    if budget is None:
        return None
    rows = list(by_model)
    tokens = budget.max_total_tokens
    if tokens is not None and sum(r.total_tokens for r in rows) > tokens:
        return "max_total_tokens"
    if budget.max_cost is not None:
        cost = total_cost(rows, prices)
        if cost is not None and cost > budget.max_cost:
            return "max_cost"
    return None


def budget_json(budget: Budget | None) -> dict[str, Any] | None:
    """A budget as stored and answered (only the limits set)."""
    if budget is None:
        return None
    out: dict[str, Any] = {}
    if budget.max_total_tokens is not None:
        out["max_total_tokens"] = budget.max_total_tokens
    if budget.max_cost is not None:
        out["max_cost"] = budget.max_cost
    return out


def totals_json(totals: UsageTotals, cost: float | None) -> dict[str, Any]:
    """The answer shape of one total: the counts, ``turns`` and ``cost`` when known."""
    out: dict[str, Any] = dict(zip(USAGE_FIELDS, totals.counts(), strict=True))
    out["total_tokens"] = totals.total_tokens
    out["turns"] = totals.turns
    if cost is not None:
        out["cost"] = cost
    return out
