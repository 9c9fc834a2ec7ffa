from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from session_server.compaction.config import (
    DEFAULT_REMAINING_PCT,
    StrategyConfig,
    effective_remaining_pct,
    resolve_strategy,
    validate_strategy,
)
from session_server.values.errors import InvalidParamsError

DEFAULTS: dict[str, Any] = {
    "mode": "none",
    "compact_keep": 2,
    "compact_trigger_turns": None,
    "token_budget": None,
    "token_soft_budget": None,
    "context_window_tokens": 400_000,
    "token_remaining_pct": None,
    "token_soft_remaining_pct": None,
    "compact_clear_tool_inputs": False,
    "compact_exclude_tools": [],
    "compact_include_tools": [],
    "raw_tail_turns": 4,
    "max_episodic_items": 3,
    "max_semantic_items": 20,
    "max_context_tokens": 200_000,
    "max_output_tokens": 0,
    "safety_margin_tokens": 256,
    "compaction_ratio": 0.8,
    "blocks": None,
}


def test_every_parameter_has_its_design_default() -> None:
    assert StrategyConfig().to_dict() == DEFAULTS
    assert resolve_strategy().to_dict() == DEFAULTS


VALID: dict[str, Any] = {
    "mode": "summarize",
    "compact_keep": 5,
    "compact_trigger_turns": 10,
    "token_budget": 8000,
    "token_soft_budget": 6000,
    "context_window_tokens": 128_000,
    "token_remaining_pct": 0.3,
    "token_soft_remaining_pct": 0.4,
    "compact_clear_tool_inputs": True,
    "compact_exclude_tools": ["get_user_profile"],
    "compact_include_tools": ["code_interpreter"],
    "raw_tail_turns": 6,
    "max_episodic_items": 5,
    "max_semantic_items": 10,
    "max_context_tokens": 100_000,
    "max_output_tokens": 4096,
    "safety_margin_tokens": 512,
    "compaction_ratio": 0.5,
    "blocks": ["persona", "user_profile"],
}


@pytest.mark.parametrize("key", sorted(VALID))
def test_each_parameter_can_be_set(key: str) -> None:
    cfg = resolve_strategy(request={key: VALID[key]})
    assert getattr(cfg, key) == VALID[key]
    others = {k: v for k, v in cfg.to_dict().items() if k != key}
    assert others == {k: v for k, v in DEFAULTS.items() if k != key}


def test_unknown_keys_are_refused_with_their_names() -> None:
    with pytest.raises(InvalidParamsError) as info:
        resolve_strategy(request={"mode": "compact", "compact_kep": 3, "budget": 1})
    msg = str(info.value)
    assert "request strategy" in msg
    assert "'compact_kep'" in msg and "'budget'" in msg
    assert info.value.code == -32602


BAD: list[tuple[str, Any]] = [
    ("mode", "aggressive"),
    ("compact_keep", -1),
    ("compact_keep", "2"),
    ("compact_keep", 2.5),
    ("compact_keep", True),
    ("compact_trigger_turns", 0),
    ("token_budget", 0),
    ("token_soft_budget", -5),
    ("context_window_tokens", 0),
    ("token_remaining_pct", 1.5),
    ("token_remaining_pct", -0.1),
    ("token_soft_remaining_pct", 2),
    ("compact_clear_tool_inputs", "yes"),
    ("compact_exclude_tools", "search"),
    ("compact_include_tools", [1]),
    ("compact_include_tools", [""]),
    ("raw_tail_turns", -1),
    ("max_episodic_items", -1),
    ("max_semantic_items", -2),
    ("max_context_tokens", 0),
    ("max_output_tokens", -1),
    ("safety_margin_tokens", -1),
    ("compaction_ratio", 0),
    ("compaction_ratio", 1.2),
]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_out_of_range_or_mistyped_values_are_refused_naming_the_key(key: str, value: Any) -> None:
    for level in ("server", "agent", "session", "request"):
        with pytest.raises(InvalidParamsError) as info:
            resolve_strategy(**{level: {key: value}})
        assert f"{level} strategy" in str(info.value)
        assert key in str(info.value)


def test_boundary_values_are_accepted() -> None:
    cfg = resolve_strategy(
        request={
            "compact_keep": 0,
            "raw_tail_turns": 0,
            "token_remaining_pct": 0.0,
            "token_soft_remaining_pct": 1.0,
            "compaction_ratio": 1.0,
            "max_semantic_items": 0,
        }
    )
    assert cfg.compact_keep == 0 and cfg.compaction_ratio == 1.0


def test_budget_that_leaves_no_input_is_refused_after_merging() -> None:
    with pytest.raises(InvalidParamsError) as info:
        resolve_strategy(agent={"max_context_tokens": 1000}, request={"max_output_tokens": 800})
    assert "max_output_tokens + safety_margin_tokens" in str(info.value)
    # Each level alone is valid; only the combination is not.
    assert validate_strategy({"max_output_tokens": 800}) == {"max_output_tokens": 800}


def test_precedence_request_over_session_over_agent_over_server() -> None:
    server = {"mode": "compact", "compact_keep": 1, "token_budget": 100, "raw_tail_turns": 7}
    agent = {"compact_keep": 2, "token_budget": 200, "max_episodic_items": 9}
    session = {"compact_keep": 3, "max_semantic_items": 11}
    request = {"compact_keep": 4}
    assert resolve_strategy(server=server).compact_keep == 1
    assert resolve_strategy(server=server, agent=agent).compact_keep == 2
    assert resolve_strategy(server=server, agent=agent, session=session).compact_keep == 3
    cfg = resolve_strategy(server=server, agent=agent, session=session, request=request)
    assert cfg.compact_keep == 4
    # keys a level does not set fall through to the level below
    assert cfg.mode == "compact"
    assert cfg.token_budget == 200
    assert cfg.raw_tail_turns == 7
    assert cfg.max_episodic_items == 9
    assert cfg.max_semantic_items == 11


def test_an_explicit_none_clears_a_lower_level_value() -> None:
    cfg = resolve_strategy(agent={"token_budget": 500}, request={"token_budget": None})
    assert cfg.token_budget is None


def test_a_config_object_contributes_only_its_explicit_fields() -> None:
    agent = StrategyConfig(compact_keep=6)
    cfg = resolve_strategy(server={"mode": "compact", "compact_keep": 1}, agent=agent)
    assert cfg.mode == "compact" and cfg.compact_keep == 6


def test_validate_strategy_returns_only_the_given_keys() -> None:
    assert validate_strategy({"mode": "compact", "compact_keep": 3}) == {
        "mode": "compact",
        "compact_keep": 3,
    }
    assert validate_strategy(None) == {}
    with pytest.raises(InvalidParamsError, match="session strategy: must be an object"):
        validate_strategy(["mode"], source="session strategy")  # type: ignore[arg-type]


def test_config_is_immutable() -> None:
    cfg = StrategyConfig()
    with pytest.raises(ValidationError, match="frozen"):
        cfg.compact_keep = 3


def test_default_remaining_pct_applies_only_when_no_trigger_is_set() -> None:
    assert effective_remaining_pct(StrategyConfig()) == DEFAULT_REMAINING_PCT == 0.2
    assert effective_remaining_pct(StrategyConfig(token_remaining_pct=0.5)) == 0.5
    for key, value in (
        ("token_budget", 10),
        ("token_soft_budget", 10),
        ("compact_trigger_turns", 3),
        ("token_soft_remaining_pct", 0.3),
    ):
        assert effective_remaining_pct(StrategyConfig.model_validate({key: value})) is None
