"""Clients of a running daemon start light: they load neither the model's runtime nor the
store's client, which only the daemon needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.daemon import running

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("onnxruntime", "chromadb")


def imported(command: list[str]) -> set[str]:
    """Every module `command` imports, from `python -X importtime`'s report."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vaultd", *command],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}


def test_status_and_search_through_a_daemon_load_neither_onnxruntime_nor_chromadb(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(ROOT / "examples" / "vault", vault)
    with running(vault, tmp_path) as daemon:
        config = str(daemon.config)
        for command in (
            ["status", "--json", "--config", config],
            [
                "search",
                "garden",
                "--json",
                "--explain",
                "--where",
                "status=done",
                "--config",
                config,
            ],
        ):
            modules = imported(command)
            assert "vaultd.api.client" in modules, command  # it did ask the daemon
            assert not [m for m in modules if m.split(".")[0] in HEAVY], command
