"""The Memory Inspector in Chromium against a real server holding the reference fixtures
(imported with ``import.session``) and a live agent (``tests/support/inspector_data.py``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.client import SessionClient
from tests.support.inspector_data import (
    LIVE_AGENT,
    LIVE_SESSION,
    import_reference,
    persist_turn,
    seed_live_agent,
)
from tests.support.server import ServerProcess, turn_messages

from .conftest import http_url, run_async


async def more_agents(url: str, count: int) -> list[str]:
    """Agents with one turn each (their mirror folders make them listed)."""
    names = [f"extra-agent-{i}" for i in range(count)]
    for name in names:
        async with SessionClient(url, name) as client:
            await client.persist_turn(await client.create_session(), turn_messages(1))
    return names


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, list[str]]]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("inspector")) / "memory")
    server.start()
    try:
        agents = run_async(import_reference(server.url))
        agents += run_async(more_agents(server.url, 5))  # 22 agents: two pages of 20
        run_async(seed_live_agent(server.url))
        yield server, agents
    finally:
        server.terminate()


@pytest.fixture
def opened(page: Page, served: tuple[ServerProcess, list[str]]) -> Page:
    page.goto(http_url(served[0]))
    expect(page.locator("#conn-status")).to_have_text("connected")
    return page


def open_live_session(page: Page) -> None:
    page.locator(f'.agent-item[data-agent="{LIVE_AGENT}"]').click()
    expect(page.locator(f'.session-item[data-session="{LIVE_SESSION}"]')).to_have_attribute(
        "aria-current", "true"
    )
    expect(page.locator("#panel-conversation details.tool-call").first).to_be_visible()


def test_agents_are_listed_newest_first_and_searchable(
    opened: Page, served: tuple[ServerProcess, list[str]]
) -> None:
    agents = [*served[1], LIVE_AGENT]
    assert len(agents) == 22
    items = opened.locator(".agent-item")
    expect(items).to_have_count(20)  # a page
    expect(items.first).to_have_attribute("data-agent", LIVE_AGENT)  # updated last
    expect(items.first).to_contain_text("1 session · updated")
    expect(opened.locator("#agents-page")).to_have_text("Page 1 of 2 · 22 agents")
    expect(opened.locator("#agents-prev")).to_be_disabled()
    first_page = items.evaluate_all("els => els.map(e => e.dataset.agent)")
    opened.locator("#agents-next").click()
    expect(opened.locator("#agents-page")).to_have_text("Page 2 of 2 · 22 agents")
    expect(items).to_have_count(2)
    expect(opened.locator("#agents-next")).to_be_disabled()
    second_page = items.evaluate_all("els => els.map(e => e.dataset.agent)")
    assert sorted(first_page + second_page) == sorted(agents)  # every agent, once
    opened.locator("#agents-prev").click()
    expect(opened.locator("#agents-page")).to_have_text("Page 1 of 2 · 22 agents")
    opened.locator("#agent-search").fill("worker")
    workers = sorted(a for a in agents if "worker" in a.lower())
    expect(items).to_have_count(len(workers))
    assert sorted(items.evaluate_all("els => els.map(e => e.dataset.agent)")) == workers
    opened.locator("#agent-search").fill("no such agent")
    expect(opened.locator("#agents-list")).to_have_text("No agent matches.")


def test_a_tool_call_is_collapsed_with_its_arguments_and_result(opened: Page) -> None:
    # A reference agent, imported from the fixtures.
    opened.locator('.agent-item[data-agent="Worker_Worker_7936"]').click()
    call = opened.locator("#panel-conversation details.tool-call").first
    expect(call).to_contain_text("write_file")
    expect(call).not_to_have_attribute("open", re.compile(".*"))
    result = call.get_by_text("File created/updated at team_output.txt")
    expect(result).to_be_hidden()
    call.locator(":scope > summary").click()
    expect(result).to_be_visible()
    expect(call.locator("pre").first).to_contain_text('"path": "team_output.txt"')
    # The live agent: a compacted result is marked, its long output folded.
    open_live_session(opened)
    long_call = opened.locator('#panel-conversation details.tool-call[data-call-id="call-3"]')
    expect(long_call.locator(":scope > summary")).to_contain_text("placeholder in context")
    long_call.locator(":scope > summary").click()
    expect(long_call.locator("details.fold summary")).to_contain_text("Show all")
    expect(long_call).to_contain_text("⟦removed: tool output for search_docs")
    # A call without a recorded result: the build's synthetic result is shown as a repair.
    repaired = opened.locator('#panel-conversation details.tool-call[data-call-id="call-email"]')
    expect(repaired.locator(":scope > summary")).to_contain_text("synthetic result")
    repaired.locator(":scope > summary").click()
    expect(repaired).to_contain_text("⟦missing: no result was recorded for send_email")


def test_tabs_switch_by_mouse_and_keyboard(opened: Page) -> None:
    open_live_session(opened)
    first = opened.get_by_role("tab", name="Conversation")
    expect(first).to_have_attribute("aria-selected", "true")
    first.focus()
    opened.keyboard.press("ArrowRight")
    context_tab = opened.get_by_role("tab", name="Working context")
    expect(context_tab).to_be_focused()
    expect(context_tab).to_have_attribute("aria-selected", "true")
    panel = opened.get_by_role("tabpanel", name="Working context")
    expect(panel).to_contain_text(re.compile(r"\d+ tokens"))
    expect(panel.locator(".badge.placeholder").first).to_be_visible()
    expect(panel.locator(".badge.synthetic")).to_have_count(1)
    panel.locator('.view-switch[data-adapter="anthropic"]').click()
    expect(panel.locator("pre.payload")).to_contain_text('"tool_use_id"')
    expect(panel.locator('.view-switch[data-adapter="anthropic"]')).to_be_focused()
    context_tab.focus()
    opened.keyboard.press("End")
    expect(opened.get_by_role("tab", name="Usage")).to_have_attribute("aria-selected", "true")
    opened.keyboard.press("ArrowLeft")
    compactions = opened.get_by_role("tabpanel", name="Compactions")
    expect(compactions.locator("li.compaction")).to_have_count(2)
    expect(compactions.locator("li.compaction").first).to_contain_text("compact")
    expect(compactions).to_contain_text(re.compile(r"tokens [\d,]+ → [\d,]+"))
    opened.get_by_role("tab", name="Episodic").click()
    expect(opened.get_by_role("tabpanel", name="Episodic")).to_contain_text("ep_0001")
    opened.get_by_role("tab", name="Semantic").click()
    expect(
        opened.get_by_role("tabpanel", name="Semantic").locator(".memory-item").first
    ).to_be_visible()
    opened.get_by_role("tab", name="Raw traces").click()
    raw = opened.get_by_role("tabpanel", name="Raw traces")
    expect(raw.locator("tbody tr").first).to_be_visible()
    raw.locator("#raw-limit").fill("3")
    raw.get_by_role("button", name="Apply").click()
    expect(raw.locator("tbody tr")).to_have_count(3)
    expect(raw.get_by_role("button", name="Apply")).to_be_focused()
    opened.get_by_role("tab", name="Raw traces").focus()
    opened.keyboard.press("Home")
    expect(opened.get_by_role("tabpanel", name="Conversation")).to_be_visible()
    expect(raw).to_be_hidden()


def test_a_persisted_turn_appears_live(
    opened: Page, served: tuple[ServerProcess, list[str]]
) -> None:
    open_live_session(opened)
    expect(opened.locator("#live-status")).to_be_visible()
    conversation = opened.locator("#panel-conversation")
    expect(conversation.get_by_text("question 101")).to_have_count(0)
    run_async(persist_turn(served[0].url, 101))  # another client, while the page is open
    expect(conversation.get_by_text("question 101")).to_be_visible()
    expect(conversation.get_by_text("answer 101")).to_be_visible()
    expect(conversation.locator('details.tool-call[data-call-id="call-101"]')).to_contain_text("ok")
