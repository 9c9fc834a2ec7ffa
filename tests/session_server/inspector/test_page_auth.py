"""The Memory Inspector against a server with tokens: refused without one, shown with one,
the token kept in sessionStorage and never in a URL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from session_server.auth import mint_token
from session_server.client import SessionClient
from tests.support.inspector_data import LIVE_AGENT, LIVE_SESSION, seed_live_agent
from tests.support.server import ServerProcess

from .conftest import http_url, run_async

TOKEN = "inspector-browser-token"
SECRET = "a-test-secret-that-is-at-least-32-bytes-long"
TOKEN_KEY = "session-server.inspector.token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = Path(tmp_path_factory.mktemp("auth"))
    (folder / "secret.txt").write_text(SECRET + "\n")
    proc = ServerProcess(
        folder / "memory", "--token", TOKEN, "--token-secret-file", str(folder / "secret.txt")
    )
    proc.start()
    try:
        run_async(seed_live_agent(proc.url, token=TOKEN))
        yield proc
    finally:
        proc.terminate()


def test_refused_without_a_token_shown_with_one(page: Page, server: ServerProcess) -> None:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(http_url(server))
    # No token: the page asks for one and shows nothing of the memory.
    expect(page.locator("#token-panel")).to_be_visible()
    expect(page.locator("#app")).to_be_hidden()
    # The server itself refuses a handshake without a token (what the page would get).
    ws_url = server.url + "/v1"
    refused = page.evaluate(
        """url => new Promise(done => {
            const ws = new WebSocket(url, ["jsonrpc"]);
            ws.onopen = () => { ws.close(); done("opened"); };
            ws.onclose = () => done("refused");
        })""",
        ws_url,
    )
    assert refused == "refused"
    # A wrong token is refused and forgotten.
    page.get_by_role("textbox", name="Token").fill("not-the-token")
    page.get_by_role("button", name="Connect").click()
    expect(page.locator("#token-error")).to_contain_text("refused this token")
    assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") is None
    # The right one: the agents are shown, the token stays in this tab only.
    page.get_by_role("textbox", name="Token").fill(TOKEN)
    page.keyboard.press("Enter")
    expect(page.locator(f'.agent-item[data-agent="{LIVE_AGENT}"]')).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") == TOKEN
    assert page.evaluate(f"localStorage.getItem({TOKEN_KEY!r})") is None
    page.locator(f'.agent-item[data-agent="{LIVE_AGENT}"]').click()
    expect(page.locator("#panel-conversation details.tool-call").first).to_be_visible()
    # A reload keeps the token (sessionStorage) and asks nothing.
    page.reload()
    expect(page.locator(f'.agent-item[data-agent="{LIVE_AGENT}"]')).to_be_visible()
    expect(page.locator("#token-panel")).to_be_hidden()
    assert requests and all(TOKEN not in url for url in [*requests, page.url])


async def last_seq(url: str) -> int:
    async with SessionClient(url, LIVE_AGENT, token=TOKEN) as client:
        return int((await client.get_session(LIVE_SESSION))["last_seq"])


def test_a_session_read_token_opens_its_session_by_link_and_writes_nothing(
    page: Page, server: ServerProcess
) -> None:
    """What a backend hands a user: a read token for one session, and a link to it."""
    token = mint_token(SECRET, agents=[LIVE_AGENT], sessions=[LIVE_SESSION], scope="read", ttl=600)
    before = run_async(last_seq(server.url))
    page.goto(http_url(server) + f"#agent={LIVE_AGENT}&session={LIVE_SESSION}")
    page.get_by_role("textbox", name="Token").fill(token)
    page.keyboard.press("Enter")
    # Listing agents is refused to this token; its session opens from the link.
    expect(page.locator("#agents-list")).to_contain_text("may not list agents")
    expect(page.locator("#open-agent")).to_be_visible()
    session = page.locator(f'.session-item[data-session="{LIVE_SESSION}"]')
    expect(session).to_have_attribute("aria-current", "true")
    expect(page.locator("#panel-conversation details.tool-call").first).to_be_visible()
    for tab in ("Working context", "Episodic", "Raw traces", "Compactions"):
        page.get_by_role("tab", name=tab).click()
        expect(page.get_by_role("tabpanel", name=tab).locator("p.error")).to_have_count(0)
    expect(page.get_by_role("tabpanel", name="Compactions").locator("li")).to_have_count(2)
    assert run_async(last_seq(server.url)) == before
