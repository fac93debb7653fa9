"""`vaultd ui`'s server in the test's own process, over a daemon's client, and the browser the
page's tests drive: Debian's Chromium through Playwright, never a downloaded build."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.daemon import PATIENCE
from vaultd.api.client import Client
from vaultd.ui.link import LinkFile
from vaultd.ui.server import UiServer

CHROMIUM = Path("/usr/bin/chromium")


@contextmanager
def ui_server(daemon: Client, vault: Path) -> Iterator[UiServer]:
    """A serving page server that never stops for idleness; stopped and closed after."""
    server = UiServer(daemon, vault, idle=0)
    server.start()
    try:
        yield server
    finally:
        server.close()
        assert server.stopped.is_set()


@contextmanager
def chromium() -> Iterator[Any]:
    """The system's Chromium, headless, closed after (the caller skips where it is absent)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()


def enter(context: Any, ui: UiServer, tmp: Path) -> Any:
    """A page of `context` let in as `vaultd ui` lets a browser in: the link file, the cookie."""
    page = context.new_page()
    with LinkFile(ui.url, tmp) as link:
        page.goto(link.uri)
        page.wait_for_url(f"http://127.0.0.1:{ui.port}/", timeout=PATIENCE * 1000)
    return page
