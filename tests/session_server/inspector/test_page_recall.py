"""The Memory Inspector's search box and summary sources, in Chromium against a real
server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.client import SessionClient
from session_server.values.events import ContextMessage
from tests.support.server import ServerProcess

from .conftest import http_url, run_async

AGENT = "recall-bot"


async def seed(url: str) -> None:
    async with SessionClient(url, AGENT) as client:
        await client.create_session(session_id="other")
        await client.persist_turn("other", [ContextMessage(role="user", content="nothing here")])
        await client.create_session(session_id="trip")
        for n in range(1, 9):
            said = "the zeppelin arrives at dawn" if n == 2 else f"small talk number {n}"
            await client.persist_turn(
                "trip",
                [
                    ContextMessage(role="user", content=said),
                    ContextMessage(role="assistant", content=f"noted {n}"),
                ],
            )
        report = await client.compact("trip", strategy={"mode": "summarize", "raw_tail_turns": 2})
        assert report["compacted"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("inspector-recall")) / "memory")
    server.start()
    try:
        run_async(seed(server.url))
        yield server
    finally:
        server.terminate()


@pytest.fixture
def opened(page: Page, served: ServerProcess) -> Page:
    page.goto(http_url(served))
    expect(page.locator("#conn-status")).to_have_text("connected")
    page.locator(f'.agent-item[data-agent="{AGENT}"]').click()
    expect(page.locator("#recall-form")).to_be_visible()
    return page


def test_a_search_hit_opens_its_session_at_the_event(opened: Page) -> None:
    opened.locator("#recall-input").fill("zeppelin")
    opened.locator("#recall-input").press("Enter")
    hits = opened.locator(".recall-hit")
    expect(hits).to_have_count(1)
    expect(opened.locator("#recall-status")).to_have_text("1 result")
    expect(hits.first).to_contain_text("trip · #3 · user_message · compacted away")
    expect(hits.first.locator("mark")).to_have_text("zeppelin")
    opened.locator('.session-item[data-session="other"]').click()
    hits.first.click()
    expect(opened.locator('.session-item[data-session="trip"]')).to_have_attribute(
        "aria-current", "true"
    )
    focused = opened.locator("#panel-conversation .hit")
    expect(focused).to_have_attribute("data-seq", "3")
    expect(focused).to_contain_text("the zeppelin arrives at dawn")
    expect(focused).to_be_in_viewport()


def test_text_that_is_not_fts5_syntax_is_searched_as_words(opened: Page) -> None:
    opened.locator("#recall-input").fill('"zeppelin arrives" AND (dawn')
    opened.locator("#recall-form button").click()
    expect(opened.locator(".recall-hit")).to_have_count(0)  # "AND" is a word it lacks
    opened.locator("#recall-input").fill('"zeppelin arrives" (dawn')
    opened.locator("#recall-form button").click()
    expect(opened.locator(".recall-hit")).to_have_count(1)
    opened.locator("#recall-input").fill("nothing-at-all-like-this")
    opened.locator("#recall-form button").click()
    expect(opened.locator("#recall-status")).to_have_text("0 results")


def test_a_summary_shows_its_sources_as_links(opened: Page) -> None:
    opened.locator('.session-item[data-session="trip"]').click()
    opened.locator("#tab-episodic").click()
    link = opened.locator("#panel-episodic .source-link").first
    expect(link).to_have_text("#1–#12")
    link.click()
    expect(opened.locator("#tab-conversation")).to_have_attribute("aria-selected", "true")
    expect(opened.locator("#panel-conversation .hit")).to_have_attribute("data-seq", "1")
    expect(opened.locator("#panel-conversation .hit")).to_contain_text("small talk number 1")
