"""Browser origins in Chromium (issue 33, finding 2): a page served from another origin
(a tiny HTTP server on another port) cannot open the server's WebSocket nor read its
HTTP JSON; with ``--allow-origin`` naming that origin it can. The Inspector itself (the
server's own origin) is covered by ``test_page.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Page

from tests.support.server import ServerProcess

from .conftest import http_url

PROBE = """
async ([wsUrl, healthUrl]) => {
  const ws = await new Promise((resolve) => {
    const socket = new WebSocket(wsUrl, "jsonrpc");
    socket.onopen = () => { socket.close(); resolve("open"); };
    socket.onerror = () => resolve("refused");
  });
  let health;
  try {
    const answer = await fetch(healthUrl);
    health = (await answer.json()).status;
  } catch (error) {
    health = "unreadable";
  }
  return [ws, health];
}
"""


class _Blank(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>another site</title><p>another site</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def other_site() -> Iterator[str]:
    """The origin of a page that is not the server's: ``http://127.0.0.1:<other port>``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Blank)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _probe(page: Page, site: str, server: ServerProcess) -> list[str]:
    page.goto(site + "/")
    result = page.evaluate(PROBE, [server.url + "/v1/agents/probe", http_url(server) + "healthz"])
    assert isinstance(result, list)
    return [str(item) for item in result]


def test_a_page_of_another_origin_cannot_use_the_server(
    page: Page, other_site: str, tmp_path: Path
) -> None:
    with ServerProcess(tmp_path / "memory") as server:
        assert _probe(page, other_site, server) == ["refused", "unreadable"]
        # The server's own page still connects (the Inspector's origin).
        page.goto(http_url(server))
        assert page.evaluate(
            PROBE, [server.url + "/v1/agents/probe", http_url(server) + "healthz"]
        ) == [
            "open",
            "ok",
        ]


def test_an_allowed_origin_can_use_the_server(page: Page, other_site: str, tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "memory", "--allow-origin", other_site) as server:
        assert _probe(page, other_site, server) == ["open", "ok"]
