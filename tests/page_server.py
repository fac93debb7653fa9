"""`vaultd ui`'s server in the test's own process, over a daemon's client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vaultd.api.client import Client
from vaultd.ui.server import UiServer, serve


@contextmanager
def ui_server(daemon: Client, vault: Path) -> Iterator[UiServer]:
    """A serving page server that never stops for idleness; stopped and closed after."""
    server = serve(daemon, vault, idle=0)
    try:
        yield server
    finally:
        server.stop()
        server.stopped.wait(10)
        server.server_close()
