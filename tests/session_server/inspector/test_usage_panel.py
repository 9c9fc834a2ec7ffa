"""The usage panel of the Memory Inspector in Chromium: tokens per turn as an SVG chart
with the compaction marked, the running total under the budget line, totals with cost,
and the expiry, against a real server started with ``--prices``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.client import SessionClient
from tests.support.server import ServerProcess

from .conftest import http_url, run_async

AGENT = "usage-panel"
SESSION = "priced"
TURNS_BEFORE, TURNS_AFTER = 6, 3


async def seed(url: str) -> None:
    async with SessionClient(url, AGENT) as client:
        await client.create_session(session_id=SESSION)
        await client.set_session_budget(SESSION, {"max_total_tokens": 200_000})
        await client.retention_set({"max_idle_days": 30})
        prompt = 1000
        for n in range(TURNS_BEFORE + TURNS_AFTER):
            if n == TURNS_BEFORE:
                out = await client.call(
                    "memory.compact",
                    {"session_id": SESSION, "strategy": {"mode": "summarize", "raw_tail_turns": 2}},
                )
                assert out["compacted"] is True
                prompt = 1500  # the sawtooth: the prompt drops after the summary
            await client.persist_turn(
                SESSION,
                [
                    {"role": "user", "content": f"question {n}"},
                    {"role": "assistant", "content": f"answer {n} " * 20},
                ],
                usage={
                    "prompt_tokens": prompt,
                    "completion_tokens": 200,
                    "prompt_tokens_details": {"cached_tokens": prompt // 2},
                },
                model="gpt-test",
            )
            prompt += 4000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = Path(tmp_path_factory.mktemp("usage-panel"))
    prices = folder / "prices.json"
    prices.write_text(json.dumps({"gpt-test": {"input": 2.0, "cached_input": 1.0, "output": 8.0}}))
    server = ServerProcess(folder / "memory", "--prices", str(prices))
    server.start()
    try:
        run_async(seed(server.url))
        yield server
    finally:
        server.terminate()


def test_usage_panel_draws_the_prompt_over_time(page: Page, served: ServerProcess) -> None:
    page.goto(http_url(served))
    expect(page.locator("#conn-status")).to_have_text("connected")
    page.locator(f'.agent-item[data-agent="{AGENT}"]').click()
    page.locator(f'.session-item[data-session="{SESSION}"]').click()
    page.locator("#tab-usage").click()
    panel = page.locator("#panel-usage")
    chart = panel.locator("svg#usage-chart")
    expect(chart).to_be_visible()
    turns = TURNS_BEFORE + TURNS_AFTER
    expect(chart.locator("circle.point")).to_have_count(turns)
    for series in ("input_tokens", "cached_input_tokens", "output_tokens"):
        points = chart.locator(f'polyline[data-series="{series}"]').get_attribute("points") or ""
        assert len(points.split()) == turns, series
    expect(chart.locator("line.compaction-mark")).to_have_count(1)
    # the mark sits between the last turn before the summary and the first after it
    circles = chart.locator("circle.point")
    mark_x = float(chart.locator("line.compaction-mark").get_attribute("x1") or "0")
    before = float(circles.nth(TURNS_BEFORE - 1).get_attribute("cx") or "0")
    after = float(circles.nth(TURNS_BEFORE).get_attribute("cx") or "0")
    assert before < mark_x < after
    # the prompt drops after the compaction: the sawtooth (smaller y is higher)
    high = float(circles.nth(TURNS_BEFORE - 1).get_attribute("cy") or "0")
    low = float(circles.nth(TURNS_BEFORE).get_attribute("cy") or "0")
    assert low > high
    expect(panel.locator("svg#usage-total-chart line#budget-line")).to_have_attribute(
        "data-limit", "200000"
    )
    expect(panel.locator("#usage-budget")).to_contain_text("200000")
    expect(panel.locator("#usage-expiry")).not_to_have_text("never")
    session_totals = panel.locator("section.usage-totals.session")
    expect(session_totals).to_contain_text(f"Turns{turns}")
    expect(session_totals).not_to_contain_text("unknown")  # every turn is priced
    expect(panel.locator("section.usage-totals.agent")).to_contain_text("Cost")
    page.screenshot(path=str(Path(served.argv[-3]).parent / "usage-panel.png"))
