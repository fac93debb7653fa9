"""Faults a restart cannot fix end `vaultd run` with a code the unit files do not retry, and a
stopped daemon is named as such at once (issue 35, finding 6).

On the code before this change a damaged `vaultd.db` and an unwritable one (immutable, or on a
read-only mount) exited 1, which systemd restarts; and with the daemon stopped by SIGSTOP,
`vaultd status` and `search` waited out the 5 s health timeout and then blamed "another
vaultd process ... query it through its socket instead".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.daemon import PATIENCE, running, wait_until
from harness.vaults import write_vault
from vaultd.errors import EXIT_STATUSES, DataDirError, LockedError, no_retry_codes
from vaultd.layout import MANIFEST

VAULTD = [sys.executable, "-m", "vaultd"]
#: What a client waited for before this change (Client.health's timeout). Where ss(8) can show
#: the socket's queue, the test proves no client knocked; elsewhere it falls back on this clock.
HEALTH_TIMEOUT = 5.0


def vaultd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*VAULTD, *args], capture_output=True, text=True, timeout=PATIENCE, check=False
    )


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vault indexed once; each test copies the data directory."""
    root = tmp_path_factory.mktemp("indexed")
    vault = write_vault(root / "vault")
    config = write_config(root, vault, root / "data")
    done = vaultd("index", "--config", str(config))
    assert done.returncode == 0, done.stderr
    return root


def write_config(root: Path, vault: Path, data: Path) -> Path:
    path = root / "vaultd.toml"
    path.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{data}"\n'
        f'[server]\nsocket = "{data / "vaultd.sock"}"\n[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    return path


@pytest.fixture
def copy(indexed: Path, tmp_path: Path) -> Path:
    """The config of a fresh copy of the indexed data directory (the vault is shared)."""
    data = tmp_path / "data"
    shutil.copytree(indexed / "data", data)
    return write_config(tmp_path, indexed / "vault", data)


def test_the_no_retry_codes_are_what_the_errors_use() -> None:
    assert DataDirError.exit_code in no_retry_codes()
    assert LockedError.exit_code in no_retry_codes()
    # 69: what was missing (the daemon a command needs) may be there on the next start.
    assert [s.code for s in EXIT_STATUSES if s.retry] == [1, 69]


def test_a_damaged_vaultd_db_is_not_retried(copy: Path) -> None:
    manifest = copy.parent / "data" / MANIFEST
    with manifest.open("r+b") as handle:
        handle.write(b"this is no SQLite database, whatever it was")
    done = vaultd("run", "--config", str(copy))
    assert done.returncode == DataDirError.exit_code, done.stderr
    assert "is damaged" in done.stderr and "mv " in done.stderr, done.stderr


@pytest.fixture
def immutable(copy: Path) -> Iterator[Path]:
    manifest = copy.parent / "data" / MANIFEST
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed: cannot make vaultd.db immutable")
    done = subprocess.run(["chattr", "+i", str(manifest)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make a file immutable here: {done.stderr.strip()}")
    try:
        yield copy
    finally:
        subprocess.run(["chattr", "-i", str(manifest)], check=True)


def test_an_immutable_vaultd_db_is_not_retried(immutable: Path) -> None:
    done = vaultd("run", "--config", str(immutable))
    assert done.returncode == DataDirError.exit_code, done.stderr
    assert "chattr -i" in done.stderr and "cannot be opened for writing" in done.stderr


@pytest.fixture
def read_only_file(copy: Path) -> Iterator[Path]:
    """vaultd.db alone on a read-only bind mount (root writes through a file's mode bits, so
    a 0444 file would not stop this test's user)."""
    manifest = copy.parent / "data" / MANIFEST
    if os.getuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a read-only bind mount needs root and mount(8)")
    done = subprocess.run(
        ["mount", "--bind", str(manifest), str(manifest)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    try:
        done = subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(manifest)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {done.stderr.strip()}")
        yield copy
    finally:
        subprocess.run(["umount", str(manifest)], check=True)


def test_a_read_only_vaultd_db_is_not_retried(read_only_file: Path) -> None:
    done = vaultd("run", "--config", str(read_only_file))
    assert done.returncode == DataDirError.exit_code, done.stderr
    assert "cannot be opened for writing" in done.stderr, done.stderr


# -- a daemon stopped with SIGSTOP -------------------------------------------------------------


def timed(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = vaultd(*args)
    return done, time.monotonic() - began


def _queued_connections(socket: Path) -> int | None:
    """Connections the kernel holds for a listener that has not accepted them (ss's Recv-Q on a
    listening Unix socket), or None where ss is missing. A stopped daemon accepts nothing, so a
    client that tried its socket leaves one here, however quickly or slowly the machine runs."""
    if shutil.which("ss") is None:
        return None
    shown = subprocess.run(
        ["ss", "-xlnH", "src", str(socket)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert shown[:2] == ["u_str", "LISTEN"], shown
    return int(shown[2])


def test_a_stopped_daemon_is_named_at_once(tmp_path: Path) -> None:
    if not os.path.isdir("/proc/self"):
        pytest.skip("this test reads the daemon's state from /proc (Linux)")
    vault = write_vault(tmp_path / "vault")
    with running(vault, tmp_path) as daemon:
        pid = daemon.process.pid
        config = str(daemon.config)
        daemon.process.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: _state(pid) == "T", "the daemon is stopped")
            said = f"the vaultd daemon (pid {pid}) is stopped (SIGSTOP)"
            queued = _queued_connections(daemon.socket)
            for command in (["status"], ["search", "anything"], ["export"]):
                done, took = timed(*command, "--config", config)
                assert done.returncode == LockedError.exit_code, done.stderr
                assert said in done.stderr and f"kill -CONT {pid}" in done.stderr, done.stderr
                assert "query it through its socket" not in done.stderr
                if queued is None:
                    assert took < HEALTH_TIMEOUT, f"{command[0]} took {took:.1f} s to say so"
                else:
                    knocked = _queued_connections(daemon.socket)
                    assert knocked == queued, f"{command[0]} tried the stopped daemon's socket"
            # A second daemon on the same data directory says the same, and is not retried.
            done = vaultd("run", "--config", config)
            assert done.returncode == LockedError.exit_code, done.stderr
            assert f"(pid {pid}) is stopped" in done.stderr, done.stderr
            report = json.loads(vaultd("doctor", "--json", "--config", config).stdout)
            checks = {c["name"]: c for c in report["checks"]}
            assert "is stopped" in checks["socket"]["message"]
            assert checks["socket"]["remedy"] == f"kill -CONT {pid}"
        finally:
            daemon.process.send_signal(signal.SIGCONT)
        # Resumed, it answers again.
        done = vaultd("status", "--json", "--config", config)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["daemon"] is True


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().rpartition(")")[2].split()[0]
