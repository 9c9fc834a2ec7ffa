"""values.usage: every provider shape normalised, prices validated, costs and budgets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.errors import InvalidParamsError
from session_server.values.usage import (
    Budget,
    ModelPrice,
    UsageTotals,
    budget_exceeded,
    cost_of,
    normalise_usage,
    parse_budget,
    parse_prices,
    total_cost,
)


def test_openai_chat_and_workers_ai() -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 300,
        "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1000},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    assert normalise_usage(usage, "gpt-4o") == UsageTotals(1200, 300, 1000, 0, 120, 1, "gpt-4o")
    workers = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert normalise_usage(workers) == UsageTotals(10, 5, 0, 0, 0, 1, None)


def test_openai_responses_and_the_agents_sdk_hook() -> None:
    usage = {
        "input_tokens": 900,
        "output_tokens": 50,
        "input_tokens_details": {"cached_tokens": 800},
        "output_tokens_details": {"reasoning_tokens": 20},
    }
    assert normalise_usage(usage) == UsageTotals(900, 50, 800, 0, 20)
    hook = {"input_tokens": 70, "output_tokens": 7, "cached_tokens": 60}
    assert normalise_usage(hook) == UsageTotals(70, 7, 60, 0, 0)


def test_anthropic_input_counts_only_the_uncached_part() -> None:
    usage = {
        "input_tokens": 30,
        "output_tokens": 40,
        "cache_read_input_tokens": 500,
        "cache_creation_input_tokens": 200,
    }
    assert normalise_usage(usage, "claude") == UsageTotals(730, 40, 500, 200, 0, 1, "claude")


def test_the_servers_own_shape_round_trips() -> None:
    own = {
        "input_tokens": 10,
        "output_tokens": 4,
        "cached_input_tokens": 3,
        "cache_write_tokens": 2,
        "reasoning_tokens": 1,
    }
    assert normalise_usage(own) == UsageTotals(10, 4, 3, 2, 1)


def test_model_comes_from_the_usage_when_not_given() -> None:
    assert normalise_usage({"prompt_tokens": 1, "model": "m"}) == UsageTotals(1, 0, model="m")
    assert normalise_usage({"prompt_tokens": 1, "model": "m"}, "n").model == "n"


def test_no_counts_no_usage() -> None:
    assert normalise_usage(None) is None
    assert normalise_usage({"something": 1}) is None


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"prompt_tokens": -1}, "usage.prompt_tokens"),
        ({"prompt_tokens": "5"}, "usage.prompt_tokens"),
        ({"input_tokens": True}, "usage.input_tokens"),
        ({"prompt_tokens": 5, "prompt_tokens_details": 3}, "usage.prompt_tokens_details"),
        (
            {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1.5}},
            "usage.prompt_tokens_details.cached_tokens",
        ),
        ({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 6}}, "usage"),
        ({"output_tokens": 2, "reasoning_tokens": 3}, "usage"),
    ],
)
def test_bad_counts_are_refused_naming_the_field(usage: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParamsError) as info:
        normalise_usage(usage)
    assert info.value.data == {"field": field}
    assert field in info.value.message


def test_a_bad_model_is_refused() -> None:
    with pytest.raises(InvalidParamsError, match="model"):
        normalise_usage({"prompt_tokens": 1}, "")


counts = st.integers(min_value=0, max_value=10**9)


@given(counts, counts, counts, counts)
def test_anthropic_and_responses_agree_on_the_prompt(
    fresh: int, read: int, write: int, out: int
) -> None:
    """The same prompt reported by Anthropic (uncached part) and in this server's shape
    (whole prompt) normalises to the same value."""
    anthropic = normalise_usage(
        {
            "input_tokens": fresh,
            "output_tokens": out,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }
    )
    own = normalise_usage(
        {
            "input_tokens": fresh + read + write,
            "output_tokens": out,
            "cached_input_tokens": read,
            "cache_write_tokens": write,
        }
    )
    assert anthropic == own
    assert anthropic is not None and anthropic.total_tokens == fresh + read + write + out


def test_gemini_and_adk_usage_metadata() -> None:
    """Gemini leaves thoughts out of its candidates and holds cached content in its
    prompt; tool-use prompts are input too. The REST API's camelCase reads the same."""
    usage = {
        "prompt_token_count": 1000,
        "candidates_token_count": 200,
        "cached_content_token_count": 600,
        "thoughts_token_count": 50,
        "tool_use_prompt_token_count": 30,
        "total_token_count": 1280,
        "prompt_tokens_details": [{"modality": "TEXT", "token_count": 1000}],
        "traffic_type": "ON_DEMAND",
    }
    expected = UsageTotals(1030, 250, 600, 0, 50, 1, "gemini-2.5-flash")
    assert normalise_usage(usage, "gemini-2.5-flash") == expected
    camel = {
        "promptTokenCount": 1000,
        "candidatesTokenCount": 200,
        "cachedContentTokenCount": 600,
        "thoughtsTokenCount": 50,
        "toolUsePromptTokenCount": 30,
    }
    assert normalise_usage(camel, "gemini-2.5-flash") == expected
    assert normalise_usage({"prompt_token_count": 7}) == UsageTotals(7, 0)
    assert normalise_usage({"total_token_count": 7}) is None


@pytest.mark.parametrize(
    ("usage", "field"),
    [
        ({"prompt_token_count": -1}, "usage.prompt_token_count"),
        ({"candidatesTokenCount": "3"}, "usage.candidatesTokenCount"),
        ({"prompt_token_count": 5, "thoughts_token_count": 1.5}, "usage.thoughts_token_count"),
        (
            {"prompt_token_count": 5, "cached_content_token_count": 6},
            "usage.cached_content_token_count",
        ),
    ],
)
def test_bad_gemini_counts_are_refused_naming_the_field(
    usage: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidParamsError) as info:
        normalise_usage(usage)
    assert info.value.data == {"field": field}


@given(counts, counts, counts, counts, counts)
def test_gemini_agrees_with_the_servers_shape(
    prompt: int, cached_part: int, candidates: int, thoughts: int, tool_use: int
) -> None:
    """A Gemini report and the same turn in this server's shape normalise alike."""
    cached = min(cached_part, prompt)
    gemini = normalise_usage(
        {
            "prompt_token_count": prompt,
            "candidates_token_count": candidates,
            "cached_content_token_count": cached,
            "thoughts_token_count": thoughts,
            "tool_use_prompt_token_count": tool_use,
        }
    )
    own = normalise_usage(
        {
            "input_tokens": prompt + tool_use,
            "output_tokens": candidates + thoughts,
            "cached_input_tokens": cached,
            "reasoning_tokens": thoughts,
        }
    )
    assert gemini == own


PRICES = {
    "gpt": {"input": 2.0, "cached_input": 0.5, "output": 8.0},
    "claude": {"input": 3, "output": 15, "cache_write": 3.75},
}


def test_prices_parse_and_cost() -> None:
    prices = parse_prices(PRICES)
    assert prices["gpt"] == ModelPrice(2.0, 8.0, 0.5, None)
    usage = UsageTotals(1_000_000, 1_000_000, 400_000, 0, 0, model="gpt")
    assert cost_of(usage, prices) == pytest.approx(600_000 * 2 / 1e6 + 400_000 * 0.5 / 1e6 + 8.0)
    # cached_input defaults to the input price, cache_write as given
    claude = UsageTotals(1_000_000, 0, 0, 1_000_000, 0, model="claude")
    assert cost_of(claude, prices) == pytest.approx(3.75)
    assert cost_of(UsageTotals(5, 5, model="other"), prices) is None
    assert cost_of(UsageTotals(5, 5), prices) is None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([], "object"),
        ({"gpt": 3}, "'gpt'"),
        ({"gpt": {"input": 1}}, "'gpt': field 'output' is missing"),
        ({"gpt": {"input": -1, "output": 1}}, "'gpt': field 'input'"),
        ({"gpt": {"input": 1, "output": "2"}}, "'gpt': field 'output'"),
        ({"gpt": {"input": 1, "output": 2, "cached": 1}}, "'gpt': unknown field 'cached'"),
        ({"gpt": {"input": 1, "output": float("nan")}}, "'gpt': field 'output'"),
    ],
)
def test_bad_prices_are_refused_naming_model_and_field(data: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_prices(data)


def test_a_total_over_an_unpriced_model_has_no_cost() -> None:
    prices = parse_prices(PRICES)
    gpt = UsageTotals(10, 10, model="gpt")
    assert total_cost([gpt], prices) is not None
    assert total_cost([gpt, UsageTotals(1, 1, model="x")], prices) is None
    assert total_cost([gpt, UsageTotals(0, 0, turns=0, model="x")], prices) is not None


def test_budgets() -> None:
    assert parse_budget(None) is None
    assert parse_budget({}) is None
    assert parse_budget({"max_total_tokens": 10}) == Budget(10, None)
    for bad, field in (
        ({"max_total_tokens": -1}, "budget.max_total_tokens"),
        ({"max_total_tokens": 1.5}, "budget.max_total_tokens"),
        ({"max_cost": "1"}, "budget.max_cost"),
        ({"tokens": 1}, "budget.tokens"),
    ):
        with pytest.raises(InvalidParamsError) as info:
            parse_budget(bad)
        assert info.value.data == {"field": field}
    prices = parse_prices(PRICES)
    rows = [UsageTotals(600, 400, model="gpt")]
    assert budget_exceeded(Budget(1000), rows, prices) is None  # at the limit: allowed
    assert budget_exceeded(Budget(999), rows, prices) == "max_total_tokens"
    assert budget_exceeded(Budget(max_cost=1.0), rows, prices) is None
    assert budget_exceeded(Budget(max_cost=0.001), rows, prices) == "max_cost"
    # a cost limit over unpriced usage is not enforced (the cost is unknown)
    assert budget_exceeded(Budget(max_cost=0.0), [UsageTotals(5, 5, model="x")], prices) is None
