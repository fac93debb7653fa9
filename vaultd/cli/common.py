"""What every `vaultd` command shares: clean errors, the --config and --vault options, the
configuration loaded, and the vault's running daemon found.

User-facing errors (`VaultdError`) become one clean message and the error's exit code; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from vaultd.errors import VaultdError

F = TypeVar("F", bound=Callable[..., Any])

CONFIG_HELP = (
    "TOML configuration file. Default: $VAULTD_CONFIG, else "
    "$XDG_CONFIG_HOME/vaultd/config.toml when it exists."
)
VAULT_HELP = "The vault folder (overrides [vault] path)."


def handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except VaultdError as exc:
            from vaultd.logs import for_stderr

            click.echo(for_stderr(f"vaultd: {exc}"), err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_file",
        type=click.Path(path_type=Path, dir_okay=False),
        help=CONFIG_HELP,
    )(func)


def vault_option(func: F) -> F:
    return click.option(
        "--vault",
        type=click.Path(path_type=Path, file_okay=False),
        help=VAULT_HELP,
    )(func)


def daemon(config: Any) -> Any:
    """A client for the running daemon of this vault, or None when none answers.

    Only that vault's daemon: see vaultd.api.locate. A configured socket served by another vault's
    daemon raises VaultMismatchError.
    """
    from vaultd.api.locate import find_daemon

    if config.vault.path is None:
        return None
    return find_daemon(
        config.server.socket, config.require_vault(), config.require_store(), os.environ
    )


def load(config_file: Path | None, vault: Path | None) -> Any:
    from vaultd.config import load_config
    from vaultd.logs import configure

    config = load_config(config_file, vault=vault, env=os.environ)
    configure(config.log)
    return config


def snippet(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat[:width] + "…" if len(flat) > width else flat


def marked(text: str) -> str:
    """A snippet's marks in bold on a terminal; elsewhere as they are (`**term**`)."""
    parts = text.split("**")
    if len(parts) % 2 == 0 or not sys.stdout.isatty():
        return text
    return "".join(click.style(p, bold=True) if i % 2 else p for i, p in enumerate(parts))


def echo_hit(rank: int, place: str, hit: Any, score: str) -> None:
    section = f" › {hit['section']}" if hit["section"] else ""
    click.echo(click.style(f"{rank}. {place}", bold=True) + f"  {hit['title']}{section}  {score}")
