"""Private by construction: under any umask, nothing vaultd creates is open to other users.

The index holds every note's text (vaultd.db) and its vectors (chroma/); the log names notes
and quotes errors. A shell's umask of 022 (or 000) must not make them readable by others.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.daemon import short_socket_dir, start, write_config
from vaultd.layout import loose

pytestmark = pytest.mark.slow

NOTES = {
    "Diary.md": "# Diary\n\nThe appointment with the doctor is on Thursday.\n",
    "Work/Plans.md": "# Plans\n\nAsk for the raise before the end of the quarter.\n",
}


def _vault(root: Path) -> Path:
    vault = root / "vault"
    for path, text in NOTES.items():
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(text, encoding="utf-8")
    return vault


def _config(root: Path, vault: Path, socket: Path) -> Path:
    return write_config(
        root / "vaultd.toml",
        vault,
        root / "state" / "data",
        socket,
        extra=f'file = "{root / "vaultd.log"}"\n',
    )


def _open_to_others(*roots: Path) -> list[str]:
    return [entry.describe() for entry in loose(*roots)]


def _everything(root: Path) -> list[Path]:
    return [root, *sorted(root.rglob("*"))]


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_an_index_made_under_a_loose_umask_is_owner_only(tmp_path: Path, umask: int) -> None:
    vault = _vault(tmp_path)
    config = _config(tmp_path, vault, short_socket_dir() / "vaultd.sock")
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", "index", "--config", str(config)],
        capture_output=True,
        text=True,
        umask=umask,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    data = tmp_path / "state" / "data"
    assert len(_everything(data)) > 5  # the manifest, the lock, chroma/ and its files
    assert _open_to_others(data, tmp_path / "vaultd.log") == []
    # The parent it had to create is private too.
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


def test_a_daemon_under_umask_000_keeps_everything_owner_only(tmp_path: Path) -> None:
    umask = 0o000  # the loosest; 022 is covered by the index test above
    vault = _vault(tmp_path)
    socket = short_socket_dir() / "vaultd.sock"
    config = _config(tmp_path, vault, socket)
    old = os.umask(umask)  # inherited by the daemon, as from a shell
    try:
        daemon = start(config, socket, tmp_path / "out.log")
    finally:
        os.umask(old)
    try:
        (vault / "New.md").write_text("# New\n\nWritten while the daemon runs.\n")
        daemon.request("POST", "/v1/search", {"query": "x", "wait_for": "New.md", "timeout": 60})
        data = tmp_path / "state" / "data"
        assert (data / "daemon.json").exists()
        assert _open_to_others(data, tmp_path / "vaultd.log") == []
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
    finally:
        daemon.stop()
    assert not (tmp_path / "state" / "data" / "daemon.json").exists()


def _doctor(config: Path) -> tuple[int, dict[str, dict[str, str]]]:
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", "doctor", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return done.returncode, checks


def test_doctor_fails_on_a_loosened_index_and_the_next_open_tightens_it(tmp_path: Path) -> None:
    vault = _vault(tmp_path)
    config = _config(tmp_path, vault, short_socket_dir() / "vaultd.sock")
    index = [sys.executable, "-m", "vaultd", "index", "--config", str(config)]
    assert subprocess.run(index, capture_output=True, timeout=300).returncode == 0
    data = tmp_path / "state" / "data"
    os.chmod(data, 0o755)
    os.chmod(data / "vaultd.db", 0o644)
    os.chmod(tmp_path / "vaultd.log", 0o666)
    code, checks = _doctor(config)
    assert code == 1
    privacy = checks["privacy"]
    assert privacy["status"] == "fail"
    assert str(data / "vaultd.db") in privacy["message"] and "644" in privacy["message"]
    assert "chmod" in privacy["remedy"]

    done = subprocess.run(index, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _open_to_others(data, tmp_path / "vaultd.log") == []
    assert "made the data directory owner-only" in (tmp_path / "vaultd.log").read_text()
    assert _doctor(config)[1]["privacy"]["status"] == "ok"


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_the_store_markers_are_born_owner_only(tmp_path: Path, umask: int) -> None:
    # In-process callers of the index (a script, a benchmark) keep their own umask.
    from vaultd.storage.probe import mark_closed, mark_open

    (tmp_path / "chroma").mkdir()
    old = os.umask(umask)
    try:
        mark_open(tmp_path)
        assert _open_to_others(tmp_path / "vaultd.dirty") == []
        mark_closed(tmp_path)
    finally:
        os.umask(old)
    assert _open_to_others(tmp_path / "vaultd.clean") == []
