"""Every command explains itself: `--help` works and says something for each one."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
from click.testing import CliRunner

from vaultd.cli.commands import main


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))


def test_every_command_has_help() -> None:
    names = list(commands(main))
    assert {("index",), ("search",), ("export",), ("inspect",), ("run",), ("status",)} <= {
        n for n in names
    }
    for name in names:
        result = CliRunner().invoke(main, [*name, "--help"])
        assert result.exit_code == 0, name
        command = main
        for part in name:
            assert isinstance(command, click.Group)
            command = command.commands[part]  # type: ignore[assignment]
        assert command.help and len(command.help.strip()) > 20, f"{name} lacks a description"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"{' '.join(name)} {param.opts[0]} lacks help"


def test_no_help_splits_an_option_name_across_lines() -> None:
    """click wraps help at hyphens: an option named in prose could read `--start-` / `page`."""
    split = re.compile(r"(^|\s)--?[\w-]*-$")
    for width in (60, 70, 80, 90, 100):
        for name in commands(main):
            result = CliRunner().invoke(main, [*name, "--help"], terminal_width=width)
            broken = [line for line in result.output.splitlines() if split.search(line)]
            assert not broken, (width, name, broken)
