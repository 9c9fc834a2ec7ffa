"""The Memory Inspector follows a session as it grows (issue 33, finding 10), in Chromium
against a real server: new turns appear in every tab without a reload, also after the
page's connection dropped, and the raw traces show each line's session seq beside its
per-turn line number."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.client import SessionClient
from tests.support.inspector_data import (
    LIVE_AGENT,
    LIVE_SESSION,
    persist_turn,
    seed_live_agent,
)
from tests.support.server import ServerProcess

from .conftest import http_url, run_async


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("inspector-live")) / "memory")
    server.start()
    try:
        run_async(seed_live_agent(server.url))
        yield server
    finally:
        server.terminate()


@pytest.fixture
def opened(page: Page, served: ServerProcess) -> Page:
    page.goto(http_url(served) + f"#agent={LIVE_AGENT}&session={LIVE_SESSION}")
    expect(page.locator("#conn-status")).to_have_text("connected")
    expect(page.locator("#live-status")).to_be_visible()
    expect(page.locator("#panel-conversation details.tool-call").first).to_be_visible()
    return page


async def event_seqs(url: str) -> dict[str, int]:
    """The session's user messages: content -> session seq."""
    async with SessionClient(url, LIVE_AGENT) as client:
        events = await client.load_events(LIVE_SESSION, limit=None)
    return {e.content: e.seq for e in events if e.action == "user_message"}


def column(page: Page, name: str) -> list[str]:
    """The texts of the raw-traces table's column headed ``name``."""
    table = page.get_by_role("tabpanel", name="Raw traces").locator("table")
    headers = table.locator("thead th").all_inner_texts()
    index = headers.index(name)
    return table.locator(f"tbody tr td:nth-child({index + 1})").all_inner_texts()


def test_raw_traces_show_the_session_seq_and_the_line_in_its_turn(
    opened: Page, served: ServerProcess
) -> None:
    opened.get_by_role("tab", name="Raw traces").click()
    raw = opened.get_by_role("tabpanel", name="Raw traces")
    expect(raw.locator("tbody tr").first).to_be_visible()
    seqs = [int(s) for s in column(opened, "event seq")]
    lines = [int(s) for s in column(opened, "line in turn")]
    assert seqs == sorted(seqs), seqs  # the session's order, across turns
    assert len(set(seqs)) > max(lines), (seqs, lines)  # does not restart each turn
    assert min(lines) == 1
    # Each user line shows the seq its event has in the session.
    by_content = run_async(event_seqs(served.url))
    rows = raw.locator("tbody tr")
    for i in range(rows.count()):
        cells = rows.nth(i).locator("td").all_inner_texts()
        text = cells[4]
        if cells[3] == "user" and text in by_content:
            assert int(cells[0]) == by_content[text], (cells, by_content[text])


def test_a_new_turn_appears_in_the_raw_traces_and_the_context(
    opened: Page, served: ServerProcess
) -> None:
    opened.get_by_role("tab", name="Raw traces").click()
    raw = opened.get_by_role("tabpanel", name="Raw traces")
    expect(raw.locator("tbody tr").first).to_be_visible()
    expect(raw.get_by_text("question 201")).to_have_count(0)
    run_async(persist_turn(served.url, 201))  # another client, while the page is open
    expect(raw.get_by_text("question 201")).to_be_visible()
    seq = run_async(event_seqs(served.url))["question 201"]
    row = raw.locator("tbody tr", has_text="question 201")
    expect(row.locator("td").first).to_have_text(str(seq))
    opened.get_by_role("tab", name="Working context").click()
    context = opened.get_by_role("tabpanel", name="Working context")
    expect(context.get_by_text("question 201")).to_be_visible()
    run_async(persist_turn(served.url, 202))
    expect(context.get_by_text("question 202")).to_be_visible()
    expect(opened.locator("#session-meta")).to_contain_text(str(seq + 7))  # the last seq


def test_the_page_follows_again_after_its_connection_drops(
    opened: Page, served: ServerProcess
) -> None:
    conversation = opened.locator("#panel-conversation")
    # The server (an idle timeout, a restart) or the network ends the agent connection.
    opened.evaluate("() => state.agentRpc.ws.close(4000, 'dropped')")
    run_async(persist_turn(served.url, 301))  # while the page has no connection, maybe
    expect(conversation.get_by_text("question 301")).to_be_visible()
    expect(opened.locator("#live-status")).to_be_visible()
    run_async(persist_turn(served.url, 302))
    expect(conversation.get_by_text("question 302")).to_be_visible()
    expect(conversation.get_by_text("question 301")).to_have_count(1)  # not twice
