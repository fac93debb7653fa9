"""Exits and set-up output that say what they mean (issue 52): `vaultd ui` with no daemon is no
usage error (69, EX_UNAVAILABLE), a declined `forget` is no usage error either (1: see
tests/test_forget.py), and `vaultd service install` where no service manager answers says so,
and what to do, instead of printing steps that fail with "Failed to connect to bus".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.daemon import PATIENCE, short_socket_dir
from vaultd.cli.service import install
from vaultd.errors import EXIT_UNAVAILABLE, NoDaemonError


def vaultd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        env={**os.environ, **env},
        check=False,
    )


def home(root: Path) -> dict[str, str]:
    return {
        "HOME": str(root / "home"),
        "XDG_CONFIG_HOME": str(root / "home" / ".config"),
        "XDG_DATA_HOME": str(root / "home" / ".local" / "share"),
        "VAULTD_CONFIG": "",
    }


def test_ui_with_no_daemon_exits_69(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    env = {**home(tmp_path), "XDG_RUNTIME_DIR": str(short_socket_dir())}
    opened = vaultd(env, "ui", "--no-browser", "--vault", str(vault))
    assert opened.returncode == EXIT_UNAVAILABLE == NoDaemonError.exit_code == 69, opened.stderr
    assert "no daemon is running" in opened.stderr


def test_service_install_where_no_service_manager_answers_says_what_to_do(tmp_path: Path) -> None:
    """The user manager is looked for where this environment says it is: nowhere. (On this
    machine there is none at all; elsewhere the variables make it so.)"""
    vault = tmp_path / "vault"
    vault.mkdir()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {
        **home(tmp_path),
        "XDG_RUNTIME_DIR": str(runtime),
        "DBUS_SESSION_BUS_ADDRESS": f"unix:path={runtime}/no-bus",
    }
    done = vaultd(env, "service", "install", "--kind", "systemd", "--vault", str(vault))
    assert done.returncode == 0, done.stderr
    unit = tmp_path / "home" / ".config" / "systemd" / "user" / "vaultd.service"
    assert unit.is_file() and f"wrote {unit}" in done.stdout
    said = done.stderr
    assert "warning: the service manager does not answer" in said, said
    assert "systemctl --user" in said or "systemctl is not installed" in said, said
    assert "loginctl enable-linger" in said, said
    assert f"run vaultd in a terminal: {sys.executable}" in said or " run --vault " in said, said
    assert f"--vault {vault}" in said, said


def test_service_install_where_the_manager_answers_warns_of_nothing(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    result = install(
        "systemd",
        None,
        vault=vault,
        env=home(tmp_path),
        command=["/b/vaultd"],
        silence=lambda kind: None,
    )
    assert result.warnings == [] and result.path.is_file()
    silent = install(
        "systemd",
        None,
        vault=vault,
        env=home(tmp_path),
        command=["/b/vaultd"],
        silence=lambda kind: "`systemctl --user show-environment`: Failed to connect to bus",
    )
    assert "Failed to connect to bus" in silent.warnings[0]
    assert silent.warnings[-1].endswith(f"/b/vaultd run --vault {vault}")
