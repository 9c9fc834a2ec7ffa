"""The Memory Inspector shows a session's branches as a tree and opens any of them
(Chromium against a real server process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.client import SessionClient
from tests.support.server import ServerProcess, turn_messages

from .conftest import http_url, run_async

AGENT = "branchy"


async def seed(url: str) -> dict[str, str]:
    async with SessionClient(url, AGENT) as client:
        root = await client.create_session(session_id="root")
        for n in (1, 2):
            await client.persist_turn(root, turn_messages(n))
        await client.fork_session(root, at_seq=4, new_session_id="root-fork")
        await client.fork_session("root-fork", new_session_id="root-fork-fork")
        rewound = await client.rewind_session(root, 4)
        return {"rewind": str(rewound["branch_session_id"])}


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("inspector-branches")) / "memory")
    server.start()
    try:
        yield server, run_async(seed(server.url))
    finally:
        server.terminate()


def test_branches_are_a_tree_and_each_opens(
    page: Page, served: tuple[ServerProcess, dict[str, str]]
) -> None:
    server, ids = served
    page.goto(http_url(server))
    expect(page.locator("#conn-status")).to_have_text("connected")
    page.locator(f'.agent-item[data-agent="{AGENT}"]').click()
    tree = page.locator('#sessions-list ul.branches[aria-label="Branches of root"]')
    expect(tree.locator(':scope > li > .session-item[data-session="root-fork"]')).to_be_visible()
    rewind = tree.locator(f':scope > li > .session-item[data-session="{ids["rewind"]}"]')
    expect(rewind).to_contain_text("branch at seq 4")
    nested = page.locator('ul.branches[aria-label="Branches of root-fork"] .session-item')
    expect(nested).to_have_attribute("data-session", "root-fork-fork")
    # Open a branch: its own conversation, and where it branched from.
    rewind.click()
    expect(page.locator("#session-title")).to_have_text(f"Session {ids['rewind']}")
    expect(page.locator("#session-meta")).to_contain_text("Branch of")
    expect(page.locator("#panel-conversation")).to_contain_text("question 2")
    page.locator("#session-meta .parent-link").click()
    expect(page.locator("#session-title")).to_have_text("Session root")
    expect(page.locator("#panel-conversation")).to_contain_text("question 1")
    expect(page.locator("#panel-conversation")).not_to_contain_text("question 2")
