"""`vaultd init`: a config file for a vault, and what to do next.

It asks nothing it can find out: the vault is the folder given, else the current folder when
Obsidian made it a vault (`.obsidian/`); the file goes where `vaultd run` looks for one. What
it writes is loaded back with vaultd.config before it takes the file's place, so a config that
`init` wrote always starts. The next steps name this vaultd by its absolute path, since an AI
tool starts `vaultd mcp` with its own PATH, and the vault by `--vault`, since the tool's minimal
environment may not find the config file (a `$VAULTD_CONFIG` of the shell, for one).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import click

from vaultd.cli.common import handle_errors
from vaultd.config import CONFIG_ENV, default_config_file, load_config
from vaultd.errors import ConfigError, SetupError
from vaultd.hints import suggest

#: Where Obsidian keeps a vault's settings: a folder holding one is a vault.
OBSIDIAN_DIR = ".obsidian"


@dataclass(frozen=True, slots=True)
class Setup:
    """What `init` wrote, and how to start and reach that vault."""

    config: Path
    vault: Path
    #: This vaultd, as a command line (see vaultd.cli.service.vaultd_command).
    vaultd: list[str]
    #: True when `vaultd run` with no --config reads this file (it is the default one).
    default_place: bool

    def with_config(self) -> list[str]:
        return [] if self.default_place else ["--config", str(self.config)]

    def mcp_command(self) -> list[str]:
        return [*self.vaultd, "mcp", "--vault", str(self.vault), *self.with_config()]

    def mcp_json(self) -> str:
        """The `mcpServers` block Claude Desktop and Cursor read."""
        command, *args = self.mcp_command()
        block = {"mcpServers": {"vaultd": {"command": command, "args": args}}}
        return json.dumps(block, indent=2, ensure_ascii=False)

    def claude_code(self) -> str:
        return "claude mcp add vaultd -- " + shlex.join(self.mcp_command())


def find_vault(given: Path | None, cwd: Path) -> Path:
    """The vault folder: the one given, else the current folder if Obsidian opened it."""
    if given is None:
        if (cwd / OBSIDIAN_DIR).is_dir():
            return cwd.resolve()
        raise SetupError(
            f"{cwd} is not an Obsidian vault (it has no {OBSIDIAN_DIR}/ folder): "
            f"name the vault's folder, as in {suggest('init', '~/Notes')}"
        )
    vault = Path(os.path.expanduser(given)).resolve()
    if not vault.is_dir():
        problem = "is not a folder" if vault.exists() else "does not exist"
        raise SetupError(f"the vault {vault} {problem}")
    return vault


def target(explicit: Path | None, env: Mapping[str, str]) -> tuple[Path, bool]:
    """Where the file goes, by the rule `vaultd run` reads it by, and whether `vaultd run`
    finds it there with no --config."""
    if explicit is not None:
        path = Path(os.path.expanduser(explicit)).absolute()
    elif env.get(CONFIG_ENV):
        path = Path(os.path.expanduser(env[CONFIG_ENV])).absolute()
    else:
        return default_config_file(env), True
    return path, path == default_config_file(env)


def config_text(vault: Path) -> str:
    # A JSON string is a valid TOML basic string: the same escapes, UTF-8 kept as it is.
    return (
        "# vaultd's configuration, written by `vaultd init`. Every other key and its default:\n"
        "# config/vaultd.example.toml in vaultd's source; `vaultd doctor` checks this file.\n"
        "\n"
        "[vault]\n"
        f"path = {json.dumps(str(vault), ensure_ascii=False)}\n"
        '# exclude = ["Templates/", "Archive/"]\n'
    )


def write(
    vault: Path,
    config: Path,
    *,
    force: bool,
    env: Mapping[str, str],
) -> None:
    """Write `config` for `vault`, owner-only, once it loads as a config that starts."""
    if (config.exists() or config.is_symlink()) and not force:
        reader = (
            "`vaultd run` reads it"
            if config == default_config_file(env)
            else f"`vaultd run --config {shlex.quote(str(config))}` reads it"
        )
        raise SetupError(
            f"{config} exists already: keep it ({reader}), or replace it with "
            f"{suggest('init', shlex.quote(str(vault)), '--force')}"
        )
    if config.is_dir():
        raise SetupError(f"{config} is a folder; name a file with --config FILE")
    # Missing parents owner-only too: ~/.config/vaultd holds nothing for anyone else.
    config.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = config.with_name(f".{config.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(config_text(vault))
        loaded = load_config(temporary, env=env)
        if loaded.vault.path != vault:
            raise ConfigError([f"[vault] path reads back as {loaded.vault.path}, not {vault}"])
        loaded.require_vault()
        loaded.require_store()
        os.chmod(temporary, 0o600)
        os.replace(temporary, config)
    finally:
        temporary.unlink(missing_ok=True)


def next_steps(setup: Setup) -> str:
    vaultd = shlex.join(setup.vaultd)
    with_config = shlex.join(setup.with_config())
    run = f"{vaultd} run {with_config}".rstrip()
    service = f"{vaultd} service install {with_config}".rstrip()
    indent = "      "
    desktop = setup.mcp_json().replace("\n", "\n" + indent)
    return "\n".join(
        [
            f"wrote {setup.config} for the vault {setup.vault}",
            "",
            "Next, start it: as a service of your user, which indexes the vault and keeps it",
            "indexed while you are logged in (it prints the command that starts it),",
            f"    {service}",
            "or in this terminal, until Ctrl-C:",
            f"    {run}",
            "",
            "Then connect an AI tool (each starts `vaultd mcp` itself, by this absolute path):",
            "  Claude Desktop: merge into claude_desktop_config.json",
            "  (Settings > Developer > Edit Config), then restart it:",
            f"{indent}{desktop}",
            "  Claude Code:",
            f"{indent}{setup.claude_code()}",
            "  Cursor: the same block as for Claude Desktop, in ~/.cursor/mcp.json",
            "  (every project) or .cursor/mcp.json (one project).",
        ]
    )


@click.command("init")
@click.argument("vault", required=False, type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where to write it. Default: $VAULTD_CONFIG, else $XDG_CONFIG_HOME/vaultd/config.toml "
    "(~/.config/vaultd/config.toml), where `vaultd run` looks.",
)
@click.option("--force", is_flag=True, help="Replace a config file that exists already.")
@handle_errors
def init(vault: Path | None, config_file: Path | None, force: bool) -> None:
    """Write a config file for VAULT and print how to start vaultd and connect AI tools.

    VAULT defaults to the current folder when it is an Obsidian vault (holds .obsidian/).
    The file is owner-only and checked by loading it before it is put in place; an existing
    one is kept unless --force. Nothing is indexed yet: the printed commands do that.

    \b
    Typical use:
      vaultd init ~/Notes
      vaultd init ~/Work --config ~/.config/vaultd/work.toml
    """
    from vaultd.cli.service import vaultd_command

    found = find_vault(vault, Path.cwd())
    path, default_place = target(config_file, os.environ)
    write(found, path, force=force, env=os.environ)
    setup = Setup(path, found, vaultd_command(), default_place)
    click.echo(next_steps(setup))
