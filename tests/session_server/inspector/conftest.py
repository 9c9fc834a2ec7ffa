"""One Chromium per test module, and a server with real data for the page to show."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.support.browser import launch_chromium
from tests.support.server import ServerProcess

VIEWPORT = {"width": 1366, "height": 768}  # a laptop screen


def http_url(server: ServerProcess) -> str:
    return "http://" + server.url.removeprefix("ws://") + "/"


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a client coroutine to completion beside Playwright's sync API (whose event
    loop owns this thread) on a thread of its own."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "client coroutine did not finish in 60 s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = launch_chromium(pw)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)  # a fresh sessionStorage per test
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()
