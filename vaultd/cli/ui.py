"""`vaultd ui`: the page in the browser, over the vault's running daemon (vaultd.ui.server).

A light client, like `vaultd status`: it opens no index and needs the daemon running. The
page's link goes into a file only the user can read (vaultd.ui.link); the browser is
started with that file's path, and the terminal is told the path, never the secret: a command
line is every local user's to read. It serves until its terminal goes, Ctrl-C, or `--idle`
without use.
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
from vaultd.errors import NoDaemonError, StartupError
from vaultd.hints import suggest
from vaultd.pipeline.discover.rules import IgnoreRules
from vaultd.ui.link import write_link
from vaultd.ui.owner import can_tell
from vaultd.ui.server import IDLE, UiServer


@click.command()
@click.option(
    "--no-browser", is_flag=True, help="Do not open a browser; say which file to open instead."
)
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
    run`), to your own processes only. The browser opens a file only you can read, which holds
    a link that lets a browser in while this runs (a bookmark of the page then works too).
    Stops with its terminal, on Ctrl-C, or after --idle seconds without use."""
    config = load_config(config_file, vault=vault, env=os.environ)
    root = config.require_vault()
    if not can_tell():
        # Without the kernel's socket tables any local user could use the port: refuse to
        # serve rather than serve everyone.
        raise StartupError(
            "vaultd ui needs to know which user each connection comes from, and this system "
            "does not say (/proc/net/tcp cannot be read); the page is not served"
        )
    client = find_daemon(config.server.socket, root, config.require_store(), os.environ)
    if client is None:
        raise NoDaemonError(
            f"no daemon is running for {root}; start it with {suggest('run')} (or "
            f"{suggest('service', 'install')}), then run {suggest('ui')} again"
        )

    def stop(signum: int, frame: FrameType | None) -> None:
        server.stop()

    server = UiServer(
        client,
        root,
        idle=idle,
        port=port,
        rules=IgnoreRules.from_config(config.vault),
        max_pdf_bytes=int(config.attachments.max_pdf_mb * 1024 * 1024),
    )
    try:
        server.start()
        with write_link(server.url, os.environ) as link:
            for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, stop)
            click.echo(f"vaultd ui for {root} (daemon on {client.path})")
            click.echo(f"open: {link.uri}")
            click.echo(
                "(a file only you can read: it opens the page in any of your browsers while this "
                "runs) Ctrl-C stops the page"
            )
            if not no_browser and not webbrowser.open(link.uri):
                click.echo(f"no browser could be started: open {link.path} in yours")
            server.stopped.wait()
    finally:
        server.close()
