"""`vaultd init`: the config it writes, what it refuses, and the next steps it prints."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from vaultd.cli.commands import main
from vaultd.config import load_config


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A home of its own, with no config anywhere."""
    home = tmp_path / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "VAULTD_CONFIG": "",
    }


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    vault = tmp_path / "My Notes"
    (vault / ".obsidian").mkdir(parents=True)
    (vault / "Garden.md").write_text("# Garden\n\nWater in the morning.\n", encoding="utf-8")
    return vault


def invoke(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def desktop_block(out: str) -> dict[str, object]:
    """The first JSON object printed after the Claude Desktop heading."""
    start = out.index("{", out.index("Claude Desktop"))
    block, _ = json.JSONDecoder().raw_decode(out[start:])
    assert isinstance(block, dict)
    return block


def test_init_writes_a_private_config_that_loads(env: dict[str, str], vault: Path) -> None:
    code, out, err = invoke(["init", str(vault)], env)
    assert code == 0, err
    config = Path(env["XDG_CONFIG_HOME"]) / "vaultd" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    loaded = load_config(config, env=env)
    assert loaded.vault.path == vault.resolve()
    assert f"wrote {config}" in out
    # No temporary file left beside it.
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_init_prints_how_to_start_it_and_the_mcp_snippets(env: dict[str, str], vault: Path) -> None:
    code, out, err = invoke(["init", str(vault)], env)
    assert code == 0, err
    from vaultd.cli.service import vaultd_command

    vaultd = vaultd_command()
    assert os.path.isabs(vaultd[0])
    # The config is where `vaultd run` looks: no --config needed.
    assert f"{shlex.join(vaultd)} service install\n" in out
    assert f"{shlex.join(vaultd)} run\n" in out
    server = desktop_block(out)["mcpServers"]["vaultd"]  # type: ignore[index]
    assert server == {"command": vaultd[0], "args": [*vaultd[1:], "mcp", "--vault", str(vault)]}
    expected = shlex.join([*vaultd, "mcp", "--vault", str(vault)])
    assert f"claude mcp add vaultd -- {expected}" in out
    assert "~/.cursor/mcp.json" in out and ".cursor/mcp.json" in out


def test_init_refuses_to_overwrite_without_force(env: dict[str, str], vault: Path) -> None:
    config = Path(env["XDG_CONFIG_HOME"]) / "vaultd" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("# mine\n", encoding="utf-8")
    code, _, err = invoke(["init", str(vault)], env)
    assert code == 2
    assert "exists already" in err and "--force" in err
    assert config.read_text(encoding="utf-8") == "# mine\n"
    code, _, err = invoke(["init", str(vault), "--force"], env)
    assert code == 0, err
    assert load_config(config, env=env).vault.path == vault.resolve()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_init_takes_the_current_folder_when_it_is_a_vault(
    env: dict[str, str], vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(vault)
    code, _, err = invoke(["init"], env)
    assert code == 0, err
    config = Path(env["XDG_CONFIG_HOME"]) / "vaultd" / "config.toml"
    assert load_config(config, env=env).vault.path == vault.resolve()
    # A folder Obsidian never opened is not guessed at.
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    code, _, err = invoke(["init", "--force"], env)
    assert code == 2
    assert "not an Obsidian vault" in err and "vaultd init ~/Notes" in err
    code, _, err = invoke(["init", str(tmp_path / "missing")], env)
    assert code == 2 and "does not exist" in err


def test_a_config_elsewhere_is_named_in_every_step(
    env: dict[str, str], vault: Path, tmp_path: Path
) -> None:
    """The MCP client's minimal environment has no $VAULTD_CONFIG: the snippets say --config."""
    elsewhere = tmp_path / "configs" / "work.toml"
    code, out, err = invoke(["init", str(vault)], {**env, "VAULTD_CONFIG": str(elsewhere)})
    assert code == 0, err
    assert load_config(elsewhere, env=env).vault.path == vault.resolve()
    assert f"service install --config {elsewhere}" in out
    server = desktop_block(out)["mcpServers"]["vaultd"]  # type: ignore[index]
    assert server["args"][-4:] == ["--vault", str(vault), "--config", str(elsewhere)]
    explicit = tmp_path / "other.toml"
    code, out, err = invoke(["init", str(vault), "--config", str(explicit)], env)
    assert code == 0, err
    assert explicit.is_file() and f"run --config {explicit}" in out
