"""The Memory Inspector's Blocks tab in Chromium: blocks, their history, diffs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.client import SessionClient
from tests.support.server import ServerProcess, turn_messages

from .conftest import http_url, run_async

AGENT = "blocks-agent"
SESSION = "blocks-session"


async def seed(url: str) -> None:
    async with SessionClient(url, AGENT) as client:
        await client.create_session(session_id=SESSION)
        await client.persist_turn(SESSION, turn_messages(1))
        await client.set_block("persona", "A calm bot.", description="Who the agent is")
        await client.set_block(
            "profile", "Name: Ada\nCity: Paris", session_id=SESSION, max_tokens=100, reason="intro"
        )
        await client.set_block(
            "profile", "Name: Ada\nCity: Lyon\nPet: cat", session_id=SESSION, reason="moved"
        )
        await client.revert_block("profile", 1, session_id=SESSION)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("inspector-blocks")) / "memory")
    server.start()
    try:
        run_async(seed(server.url))
        yield server
    finally:
        server.terminate()


def test_blocks_tab_shows_blocks_history_and_diffs(page: Page, served: ServerProcess) -> None:
    page.goto(http_url(served))
    expect(page.locator("#conn-status")).to_have_text("connected")
    page.locator(f'.agent-item[data-agent="{AGENT}"]').click()
    expect(page.locator(f'.session-item[data-session="{SESSION}"]')).to_have_attribute(
        "aria-current", "true"
    )
    page.locator("#tab-blocks").click()
    panel = page.locator("#panel-blocks")
    blocks = panel.locator("article.block")
    expect(blocks).to_have_count(2)
    # Agent blocks first, then the session's, each with the usage header of the prompt.
    expect(blocks.nth(0)).to_have_attribute("data-label", "persona")
    expect(blocks.nth(0).locator("h3")).to_contain_text("agent")
    profile = panel.locator('article.block[data-label="profile"]')
    expect(profile.locator("h3")).to_contain_text(re.compile(r"\[profile · \d+% of 100 tokens\]"))
    expect(profile.locator("h3")).to_contain_text("session")
    profile.locator("details.history > summary").click()
    revisions = profile.locator("li.revision")
    expect(revisions).to_have_count(3)
    expect(revisions.nth(0)).to_contain_text("revert to revision 1")
    expect(revisions.nth(1)).to_contain_text("reason: moved")
    expect(revisions.nth(1)).to_contain_text("client")
    revisions.nth(1).locator("details > summary").click()
    diff = revisions.nth(1).locator("pre.diff")
    expect(diff.locator(".del")).to_have_text(["- City: Paris\n"])
    expect(diff.locator(".ins")).to_have_text(["+ City: Lyon\n", "+ Pet: cat\n"])
