"""Render a screenshot of each Memory Inspector tab into docs/ (used by the README).

Starts ``session-server serve`` on 127.0.0.1 over a temporary memory dir, imports the
reference fixtures and builds the live agent (``tests/support/inspector_data.py``), then
drives Debian's Chromium (``/usr/bin/chromium``) with Playwright at a laptop size
(1366x768) and writes ``docs/inspector-<tab>.png``.

    .venv/bin/python scripts/screenshots.py [--out docs] [--width 1366] [--height 768]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from playwright.sync_api import Page, sync_playwright  # noqa: E402

from tests.support.browser import launch_chromium  # noqa: E402
from tests.support.inspector_data import (  # noqa: E402
    LIVE_AGENT,
    LIVE_SESSION,
    import_reference,
    seed_live_agent,
)
from tests.support.server import ServerProcess  # noqa: E402

TABS = ("conversation", "context", "episodic", "semantic", "raw", "compactions")


def _shoot(page: Page, out: Path) -> list[Path]:
    written: list[Path] = []
    page.get_by_role("button", name=LIVE_AGENT).click()
    page.locator(f'.session-item[data-session="{LIVE_SESSION}"][aria-current="true"]').wait_for()
    page.locator("#panel-conversation details.tool-call").first.wait_for()
    # Open the tool call with the long output (folded; a placeholder in the context).
    call = page.locator('#panel-conversation details.tool-call[data-call-id="call-3"]')
    call.locator(":scope > summary").click()
    for tab in TABS:
        page.locator(f"#tab-{tab}").click()
        panel = page.locator(f"#panel-{tab}")
        panel.locator(":scope > *:not(.muted)").first.wait_for()
        if tab == "conversation":  # the click scrolled the tab into view: back to the call
            call.scroll_into_view_if_needed()
        path = out / f"inspector-{tab}.png"
        page.screenshot(path=str(path))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--width", type=int, default=1366)
    parser.add_argument("--height", type=int, default=768)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="inspector-shots-") as tmp:
        server = ServerProcess(Path(tmp) / "memory")
        url = server.start()
        try:
            asyncio.run(import_reference(url))
            asyncio.run(seed_live_agent(url))
            http_url = "http://" + url.removeprefix("ws://") + "/"
            with sync_playwright() as pw:
                browser = launch_chromium(pw)
                page = browser.new_page(viewport={"width": args.width, "height": args.height})
                page.goto(http_url)
                for path in _shoot(page, args.out):
                    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
                browser.close()
        finally:
            server.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
