"""`vaultd ui`: the page in the browser, over the vault's running daemon (vaultd.ui.server).

A light client, like `vaultd status`: it opens no index and needs the daemon running. It
prints the one-time URL (holding the secret) on the terminal, opens the browser at it unless
told not to, and serves until its terminal goes, Ctrl-C, or `--idle` without use.
"""

from __future__ import annotations

import os
import signal
import webbrowser
from pathlib import Path
from types import FrameType

import click

from vaultd.api.locate import find_daemon
from vaultd.cli.common import vault_command
from vaultd.config import load_config
from vaultd.errors import SetupError
from vaultd.ui.server import IDLE, serve


@click.command()
@click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a browser.")
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    default=IDLE,
    show_default=True,
    help="Stop after this many seconds without use (0: never).",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Port (default: a free one)."
)
@vault_command
def ui(
    no_browser: bool, idle: float, port: int, config_file: Path | None, vault: Path | None
) -> None:
    """Open a page in the browser: search as you type, notes with their connections, health.

    Served on 127.0.0.1 by this process for the vault's running daemon (start it with `vaultd
    run`); the URL printed holds a one-time secret. Stops with its terminal, on Ctrl-C, or after
    --idle seconds without use."""
    config = load_config(config_file, vault=vault, env=os.environ)
    root = config.require_vault()
    client = find_daemon(config.server.socket, root, config.require_store(), os.environ)
    if client is None:
        raise SetupError(
            f"no daemon is running for {root}; start it with `vaultd run --vault {root}` "
            "(or `vaultd service install`), then run `vaultd ui` again"
        )
    server = serve(client, root, idle=idle, port=port)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.stop()

    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    click.echo(f"vaultd ui for {root} (daemon on {client.path})")
    click.echo(f"open: {server.url}", err=False)
    click.echo("the link works once; Ctrl-C stops the page")
    if not no_browser:
        webbrowser.open(server.url)
    server.stopped.wait()
    server.server_close()
