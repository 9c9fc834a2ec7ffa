from __future__ import annotations

import pytest

from session_server.compaction.config import StrategyConfig
from session_server.compaction.triggers import (
    check_compact_triggers,
    compaction_required,
    input_budget,
    needs_token_count,
    token_pressure,
)
from session_server.values.errors import InvalidParamsError


def test_input_budget_defaults() -> None:
    assert input_budget(StrategyConfig()) == 200_000 - 0 - 256


def test_input_budget_uses_every_parameter() -> None:
    cfg = StrategyConfig(
        max_context_tokens=10_000, max_output_tokens=2_000, safety_margin_tokens=500
    )
    assert input_budget(cfg) == 7_500


def test_pressure_fires_strictly_above_ratio_times_budget() -> None:
    cfg = StrategyConfig(
        max_context_tokens=10_000,
        max_output_tokens=1_000,
        safety_margin_tokens=0,
        compaction_ratio=0.5,
    )
    # input_budget 9000, threshold 4500
    assert not compaction_required({"prompt_tokens": 4500, "completion_tokens": 10}, cfg)
    assert compaction_required({"prompt_tokens": 4501, "completion_tokens": 10}, cfg)
    p = token_pressure({"prompt_tokens": 4501}, cfg)
    assert (p.prompt_tokens, p.input_budget, p.threshold, p.required) == (4501, 9000, 4500.0, True)


def test_pressure_with_default_config() -> None:
    threshold = 0.8 * (200_000 - 256)
    assert not compaction_required({"prompt_tokens": int(threshold)}, StrategyConfig())
    assert compaction_required({"prompt_tokens": int(threshold) + 1}, StrategyConfig())


def test_ratio_changes_the_threshold() -> None:
    low = StrategyConfig(compaction_ratio=0.1)
    assert compaction_required({"prompt_tokens": 20_000}, low)
    assert not compaction_required({"prompt_tokens": 20_000}, StrategyConfig())


def test_no_usage_never_requires_compaction() -> None:
    assert not compaction_required(None, StrategyConfig())
    assert not compaction_required({"completion_tokens": 5}, StrategyConfig())


def test_input_tokens_is_read_when_prompt_tokens_is_absent() -> None:
    assert compaction_required({"input_tokens": 199_000}, StrategyConfig())


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -1},
        {"prompt_tokens": "10"},
        {"prompt_tokens": 1.5},
        {"completion_tokens": True},
    ],
)
def test_bad_usage_values_are_refused_naming_the_key(usage: dict[str, object]) -> None:
    with pytest.raises(InvalidParamsError, match=r"usage\.(prompt|completion)_tokens"):
        token_pressure(usage, StrategyConfig())


def test_turn_trigger_fires_above_the_count() -> None:
    cfg = StrategyConfig(compact_trigger_turns=5)
    assert check_compact_triggers(cfg, turns_since_boundary=5, context_tokens=None).fired == ()
    fired = check_compact_triggers(cfg, turns_since_boundary=6, context_tokens=None).fired
    assert fired == ("compact_trigger_turns",)


def test_token_budget_and_soft_budget() -> None:
    cfg = StrategyConfig(token_budget=1000, token_soft_budget=800)
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=800).fired == ()
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=801).fired == (
        "token_soft_budget",
    )
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=1001).fired == (
        "token_budget",
        "token_soft_budget",
    )


def test_remaining_pct_of_the_context_window() -> None:
    cfg = StrategyConfig(context_window_tokens=1000, token_remaining_pct=0.25)
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=750).fired == ()
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=751).fired == (
        "token_remaining_pct",
    )


def test_soft_remaining_pct() -> None:
    cfg = StrategyConfig(context_window_tokens=1000, token_soft_remaining_pct=0.5)
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=500).fired == ()
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=501).fired == (
        "token_soft_remaining_pct",
    )


def test_default_twenty_percent_remaining_when_nothing_is_set() -> None:
    cfg = StrategyConfig(context_window_tokens=1000)
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=800).fired == ()
    assert check_compact_triggers(cfg, turns_since_boundary=0, context_tokens=801).fired == (
        "token_remaining_pct",
    )
    # a budget replaces the default percentage
    with_budget = StrategyConfig(context_window_tokens=1000, token_budget=5000)
    assert (
        check_compact_triggers(with_budget, turns_since_boundary=0, context_tokens=900).fired == ()
    )


def test_pressure_is_a_trigger_and_unknown_tokens_skip_token_triggers() -> None:
    cfg = StrategyConfig(token_budget=10)
    check = check_compact_triggers(cfg, turns_since_boundary=1, context_tokens=None, pressure=True)
    assert check.fired == ("token_pressure",)
    assert "turns=1" in check.detail


def test_needs_token_count() -> None:
    assert needs_token_count(StrategyConfig())  # the default 20% remaining
    assert not needs_token_count(StrategyConfig(compact_trigger_turns=3))
    assert needs_token_count(StrategyConfig(compact_trigger_turns=3, token_budget=5))


def test_usage_prompt_tokens_reads_every_provider_shape() -> None:
    from session_server.compaction.triggers import usage_prompt_tokens

    assert usage_prompt_tokens({"prompt_tokens": 7, "completion_tokens": 1}) == 7
    assert usage_prompt_tokens({"input_tokens": 7, "output_tokens": 1}) == 7  # Responses
    anthropic = {"input_tokens": 3, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 5}
    assert usage_prompt_tokens(anthropic) == 98
    assert usage_prompt_tokens({"cache_read_input_tokens": 4}) == 4
    assert usage_prompt_tokens({"output_tokens": 1}) is None


def test_without_usage_the_server_count_is_the_prompt_size() -> None:
    cfg = StrategyConfig(max_context_tokens=1256)  # budget 1000, threshold 800
    counted = token_pressure(None, cfg, context_tokens=900)
    assert counted.required and counted.source == "server_count" and counted.prompt_tokens == 900
    reported = token_pressure({"prompt_tokens": 10}, cfg, context_tokens=900)
    assert not reported.required and reported.source == "usage"
    assert token_pressure(None, cfg).source == "none"
