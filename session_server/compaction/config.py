"""Compaction strategy configuration: the validated model and its precedence (pure).

Every parameter of DESIGN §6 is a field of ``StrategyConfig`` with its default. Values are
validated strictly (no string-to-number coercion); unknown keys and out-of-range values
are refused with ``InvalidParamsError`` naming the key and the level it came from.

Precedence (later wins, key by key): server default < agent default < per session
(persisted) < per request. A level is a partial mapping: only the keys it sets override
the levels below it, and an explicit ``None`` clears an optional value set below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from ..values.errors import InvalidParamsError

__all__ = [
    "COMPACT_PARAM_NAMES",
    "DEFAULT_REMAINING_PCT",
    "LEVELS",
    "Mode",
    "StrategyConfig",
    "effective_remaining_pct",
    "resolve_strategy",
    "validate_strategy",
]

Mode = Literal["none", "compact", "summarize"]

LEVELS: Final[tuple[str, ...]] = ("server", "agent", "session", "request")

# Remaining-fraction trigger applied when no other compact trigger is configured.
DEFAULT_REMAINING_PCT: Final = 0.2

# The parameters that decide what a compact record replaces (stored in the record).
COMPACT_PARAM_NAMES: Final[tuple[str, ...]] = (
    "compact_keep",
    "compact_clear_tool_inputs",
    "compact_exclude_tools",
    "compact_include_tools",
)


class StrategyConfig(BaseModel):
    """The memory strategy of a request, resolved from all levels.

    ``mode``: ``none`` (no new compactions; an existing compaction record is still
    honoured by the builder), ``compact`` (placeholders) or ``summarize`` (episodic +
    semantic memory). Compact triggers: ``compact_trigger_turns`` (turns not yet behind
    the compaction boundary), ``token_budget``/``token_soft_budget`` (tokens of the built
    context), ``token_remaining_pct``/``token_soft_remaining_pct`` (fraction of
    ``context_window_tokens`` left; 0.2 when no other trigger is set). Token pressure
    (``input_budget = max_context_tokens - max_output_tokens - safety_margin_tokens``,
    early trigger at ``compaction_ratio * input_budget``) applies to both strategies.
    ``blocks`` pins the memory blocks a session's context shows, by label (``None``:
    every block of the agent and of the session).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    mode: Mode = "none"
    # compact (placeholders)
    compact_keep: int = Field(default=2, ge=0)
    compact_trigger_turns: int | None = Field(default=None, ge=1)
    token_budget: int | None = Field(default=None, ge=1)
    token_soft_budget: int | None = Field(default=None, ge=1)
    context_window_tokens: int = Field(default=400_000, ge=1)
    token_remaining_pct: float | None = Field(default=None, ge=0.0, le=1.0)
    token_soft_remaining_pct: float | None = Field(default=None, ge=0.0, le=1.0)
    compact_clear_tool_inputs: bool = False
    compact_exclude_tools: list[str] = Field(default_factory=list)
    compact_include_tools: list[str] = Field(default_factory=list)
    # summarize (episodic + semantic)
    raw_tail_turns: int = Field(default=4, ge=0)
    max_episodic_items: int = Field(default=3, ge=0)
    max_semantic_items: int = Field(default=20, ge=0)
    # token pressure (provider-reported usage)
    max_context_tokens: int = Field(default=200_000, ge=1)
    max_output_tokens: int = Field(default=0, ge=0)
    safety_margin_tokens: int = Field(default=256, ge=0)
    compaction_ratio: float = Field(default=0.8, gt=0.0, le=1.0)
    # memory blocks: the labels a session's context shows (None: every block)
    blocks: list[str] | None = Field(default=None, max_length=64)

    @model_validator(mode="after")
    def _check_budget(self, info: ValidationInfo) -> StrategyConfig:
        for name in ("compact_exclude_tools", "compact_include_tools"):
            if any(not t for t in getattr(self, name)):
                raise ValueError(f"{name} must not contain empty tool names")
        if self.blocks is not None and any(not b for b in self.blocks):
            raise ValueError("blocks must not contain empty labels")
        if isinstance(info.context, dict) and info.context.get("partial"):
            return self
        reserved = self.max_output_tokens + self.safety_margin_tokens
        if reserved >= self.max_context_tokens:
            raise ValueError(
                "max_output_tokens + safety_margin_tokens "
                f"({self.max_output_tokens} + {self.safety_margin_tokens}) must be less than "
                f"max_context_tokens ({self.max_context_tokens})"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Every parameter as plain JSON-compatible data."""
        return self.model_dump(mode="json")


def _describe(exc: ValidationError, source: str) -> str:
    problems: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key {loc!r}")
        elif loc:
            problems.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
        else:
            problems.append(str(err["msg"]).removeprefix("Value error, "))
    return f"{source}: " + "; ".join(problems)


def validate_strategy(
    values: Mapping[str, Any] | StrategyConfig | None,
    *,
    source: str = "strategy",
    partial: bool = True,
) -> dict[str, Any]:
    """Validate one level and return only the keys it sets (normalised).

    Use it before persisting a per-session strategy (``memory.set_strategy``). With
    ``partial`` (the default) cross-field rules are left to ``resolve_strategy``, since a
    level may be valid only in combination with the levels below it. Raises
    ``InvalidParamsError`` naming ``source`` and every bad key.
    """
    if values is None:
        return {}
    if isinstance(values, StrategyConfig):
        return values.model_dump(mode="json", exclude_unset=True)
    if not isinstance(values, Mapping):
        raise InvalidParamsError(
            f"{source}: must be an object, got {type(values).__name__}", data={"field": source}
        )
    bad_keys = [k for k in values if not isinstance(k, str)]
    if bad_keys:
        raise InvalidParamsError(f"{source}: keys must be strings, got {bad_keys!r}")
    try:
        model = StrategyConfig.model_validate(dict(values), context={"partial": partial})
    except ValidationError as exc:
        raise InvalidParamsError(_describe(exc, source), data={"field": source}) from exc
    dumped = model.model_dump(mode="json")
    return {k: dumped[k] for k in values}


def resolve_strategy(
    server: Mapping[str, Any] | StrategyConfig | None = None,
    agent: Mapping[str, Any] | StrategyConfig | None = None,
    session: Mapping[str, Any] | StrategyConfig | None = None,
    request: Mapping[str, Any] | StrategyConfig | None = None,
) -> StrategyConfig:
    """Merge the levels (later wins, key by key) into one validated ``StrategyConfig``.

    Each level is validated on its own first, so an error names the level
    (``"request strategy: unknown key 'x'"``); the merged result is then checked as a
    whole (``"strategy: max_output_tokens + safety_margin_tokens ... "``). A
    ``StrategyConfig`` given as a level contributes only the fields set explicitly on it.
    """
    merged: dict[str, Any] = {}
    for level, values in zip(LEVELS, (server, agent, session, request), strict=True):
        merged.update(validate_strategy(values, source=f"{level} strategy"))
    try:
        return StrategyConfig.model_validate(merged)
    except ValidationError as exc:
        raise InvalidParamsError(_describe(exc, "strategy"), data={"field": "strategy"}) from exc


def effective_remaining_pct(config: StrategyConfig) -> float | None:
    """``token_remaining_pct``, or 0.2 when no compact trigger at all is configured.

    "No trigger" means none of ``compact_trigger_turns``, ``token_budget``,
    ``token_soft_budget``, ``token_remaining_pct``, ``token_soft_remaining_pct`` is set.
    """
    if config.token_remaining_pct is not None:
        return config.token_remaining_pct
    others = (
        config.compact_trigger_turns,
        config.token_budget,
        config.token_soft_budget,
        config.token_soft_remaining_pct,
    )
    if all(v is None for v in others):
        return DEFAULT_REMAINING_PCT
    return None
