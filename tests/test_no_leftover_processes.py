"""A daemon killed with SIGKILL leaves no process behind: its parser workers (and the
multiprocessing resource tracker they keep open) end by themselves. The session-wide check in
`tests/conftest.py` fails any run that leaves one; this test is the kill -9 case, alone."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from harness.daemon import PATIENCE, short_socket_dir, start, wait_until, write_config
from tests import leftovers

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: Enough notes that the first pass parses them in worker processes (`POOL_ABOVE`).
NOTES = 400


def workers_of(pid: int) -> list[leftovers.Proc]:
    return [p for p in leftovers.descendants(pid) if "multiprocessing" in p.command]


def test_a_daemon_killed_mid_index_leaves_no_parser_worker_behind(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(NOTES):
        (vault / f"n{i:03}.md").write_text(f"# Note {i}\n\nA lynx walks {i} miles at night.\n")
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", socket)
    daemon = start(config, socket, tmp_path / "vaultd.log", wait_ready=False)
    try:
        pid = daemon.process.pid
        wait_until(
            lambda: any("spawn_main" in p.command for p in workers_of(pid)),
            "the first pass parses in worker processes",
        )
        # The workers and, beside them, the resource tracker that their pool started.
        helpers = [p.pid for p in workers_of(pid)]
        daemon.process.send_signal(signal.SIGKILL)
        assert daemon.process.wait(PATIENCE) == -signal.SIGKILL
        left = leftovers.wait_gone(helpers, PATIENCE)
        assert left == [], [p.command for p in leftovers.processes() if p.pid in left]
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(PATIENCE)
