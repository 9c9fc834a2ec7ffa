"""Debian's Chromium under Playwright (Playwright's own browser download is not used).

``scripts/test`` installs the ``chromium`` package when ``/usr/bin/chromium`` is missing.
``launch_chromium(playwright)`` starts it headless with the flags that keep it off the
network (no background updates, sync or QUIC) and usable as root in a container.
"""

from __future__ import annotations

from typing import Final

from playwright.sync_api import Browser, Playwright

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "launch_chromium"]

CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def launch_chromium(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
