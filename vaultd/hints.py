"""The `vaultd` commands that messages tell the user to run, spelled with the options they gave.

A suggestion must act on what the user was acting on: after `vaultd index --vault ~/Work` is
interrupted, a bare "run `vaultd index` again" would index the default vault instead. So the
command line's --config and --vault are recorded once, as a command starts
(vaultd.cli.common.handle_errors, which every command goes through; the daemon's and the MCP
bridge's messages too), and every message renders the commands it suggests with `suggest`,
which adds those of the options that the suggested command takes.

The options are recorded as absolute paths: an MCP client shows the bridge's messages to a user
whose shell is somewhere else.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

#: The options carried, in the order they are written.
CARRIED = ("--config", "--vault")

#: The invocation's carried options and their values, as given.
_given: dict[str, str] = {}


def _every_command_takes_both(words: Sequence[str]) -> frozenset[str]:
    return frozenset(CARRIED)


#: Which options a command (its words: `("service", "install")`) takes; the CLI says, from its
#: commands' declarations. Until it does, every command is taken to take both.
_takes: Callable[[Sequence[str]], frozenset[str]] = _every_command_takes_both


def given(
    config: Path | None,
    vault: Path | None,
    takes: Callable[[Sequence[str]], frozenset[str]] | None = None,
) -> None:
    """Record the invocation's --config and --vault (None: not given), and how to tell which
    of them a command takes."""
    global _takes
    _given.clear()
    for option, value in zip(CARRIED, (config, vault), strict=True):
        if value is not None:
            _given[option] = os.path.abspath(os.path.expanduser(value))
    if takes is not None:
        _takes = takes


def command(*words: str) -> str:
    """`vaultd WORDS...` with the invocation's options that it takes. WORDS are written as
    they are (a placeholder such as PATH stays one); the options' values are shell-quoted."""
    takes = _takes(words)
    options = [
        part
        for option, value in _given.items()
        if option in takes
        for part in (option, shlex.quote(value))
    ]
    return " ".join(("vaultd", *words, *options))


def suggest(*words: str) -> str:
    """`command(*words)` in backticks, as messages quote a command."""
    return f"`{command(*words)}`"
