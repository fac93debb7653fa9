"""The `vaultd` command: a thin layer over the library.

User-facing errors (`VaultdError`) become one clean message and the error's exit code; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from vaultd import __version__
from vaultd.errors import VaultdError

F = TypeVar("F", bound=Callable[..., Any])

CONFIG_HELP = (
    "TOML configuration file. Default: $VAULTD_CONFIG, else "
    "$XDG_CONFIG_HOME/vaultd/config.toml when it exists."
)
VAULT_HELP = "The vault folder (overrides [vault] path)."


def _handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except VaultdError as exc:
            click.echo(f"vaultd: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def _config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_file",
        type=click.Path(path_type=Path, dir_okay=False),
        help=CONFIG_HELP,
    )(func)


def _vault_option(func: F) -> F:
    return click.option(
        "--vault",
        type=click.Path(path_type=Path, file_okay=False),
        help=VAULT_HELP,
    )(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="vaultd")
def main() -> None:
    """Keep an Obsidian vault indexed for retrieval, continuously and locally.

    \b
    Typical use:
      vaultd index --vault ~/Notes          index once (only changes cost work)
      vaultd search "how do I sync" --vault ~/Notes
      vaultd inspect ~/Notes/Ideas.md       what would be indexed for one note
    """


@main.command()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_config_option
@_vault_option
@_handle_errors
def inspect(file: Path, as_json: bool, config_file: Path | None, vault: Path | None) -> None:
    """Parse and chunk one note and print what would be indexed.

    Touches no index. The note's path is shown relative to the vault when FILE is inside it.
    """
    from vaultd.config import load_config
    from vaultd.preview import preview_file, render_text

    config = load_config(config_file, vault=vault, env=os.environ)
    report = preview_file(file, config)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        click.echo(render_text(report))
