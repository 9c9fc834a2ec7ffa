"""The Memory Inspector types a live turn in every open tab (two Chromium pages against
a real server subprocess): chunks appear as the producer appends them, a tab opened in
the middle shows the reply so far, and once the turn is stored the typed reply gives way
to the stored message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from session_server.client import SessionClient
from tests.support.server import ServerProcess

from .conftest import VIEWPORT, http_url, run_async

AGENT = "typing-agent"
SESSION = "story"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("inspector-streams")) / "memory")
    server.start()
    try:
        run_async(_create(server.url))
        yield server
    finally:
        server.terminate()


async def _create(url: str) -> None:
    async with SessionClient(url, AGENT) as client:
        await client.create_session(session_id=SESSION)


async def _open(url: str) -> dict[str, Any]:
    async with SessionClient(url, AGENT) as client:
        return await client.stream_open(SESSION, base_seq=0)


async def _append(url: str, opened: dict[str, Any], *texts: str) -> None:
    async with SessionClient(url, AGENT) as client:
        chunks = [{"type": "text", "text": t} for t in texts]
        await client.stream_append(opened["stream_id"], opened["generation"], chunks)


async def _close(url: str, opened: dict[str, Any], reply: str) -> None:
    async with SessionClient(url, AGENT) as client:
        turn = {"messages": [{"role": "user", "content": "A story?"},
                             {"role": "assistant", "content": reply}]}  # fmt: skip
        await client.stream_close(opened["stream_id"], opened["generation"], turn)


def tab(browser: Browser, served: ServerProcess) -> Page:
    size = ViewportSize(width=VIEWPORT["width"], height=VIEWPORT["height"])
    page = browser.new_context(viewport=size).new_page()
    page.set_default_timeout(15_000)
    page.goto(http_url(served) + f"#agent={AGENT}&session={SESSION}")
    expect(page.locator("#conn-status")).to_have_text("connected")
    expect(page.locator("#live-status")).to_be_visible()
    return page


def test_a_live_turn_is_typed_in_every_tab(browser: Browser, served: ServerProcess) -> None:
    first = tab(browser, served)
    try:
        opened = run_async(_open(served.url))
        run_async(_append(served.url, opened, "Once", " upon"))
        expect(first.locator("#live-reply .text")).to_have_text("Once upon")
        second = tab(browser, served)  # opened in the middle: the reply so far
        try:
            expect(second.locator("#live-reply .text")).to_have_text("Once upon")
            run_async(_append(served.url, opened, " a", " time."))
            for page in (first, second):
                expect(page.locator("#live-reply .text")).to_have_text("Once upon a time.")
                expect(page.locator("#live-reply")).to_contain_text("typing")
            run_async(_close(served.url, opened, "Once upon a time."))
            for page in (first, second):
                expect(page.locator("#live-reply")).to_have_count(0)
                conversation = page.locator("#panel-conversation")
                expect(conversation.get_by_text("Once upon a time.")).to_have_count(1)
                expect(conversation.get_by_text("A story?")).to_have_count(1)
        finally:
            second.context.close()
    finally:
        first.context.close()
