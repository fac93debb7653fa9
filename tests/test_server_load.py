"""Requests that cannot starve the server: long-polls and slow senders by the hundred, and
health answered all along, with no thread of the daemon's spent on any of them (a real daemon on
a real socket; see harness/load.py for the load)."""

from __future__ import annotations

import time
from pathlib import Path

from harness.daemon import PATIENCE, running
from harness.load import Load
from harness.vaults import write_vault
from vaultd.api.server import HEADER_TIMEOUT

#: How long the load lasts: each long-poll waits this long, slow senders trickle this long.
HOLD = 2 * HEADER_TIMEOUT + 5
#: What a health answer may take under the load, on a machine also busy with other work. The
#: daemon answers within a second here (bench/soak/starvation.py measures it); this bounds a
#: failure.
SLOW_HEALTH = 10.0
#: The daemon's threads under the load: its own (the worker, the watcher, the model's, the
#: store's), the server's event loop and its bounded pools. A thread a connection would be
#: four hundred.
MOST_THREADS = 40


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    return int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1])


def test_health_is_answered_under_300_long_polls_and_100_slow_senders(tmp_path: Path) -> None:
    vault = write_vault(tmp_path / "vault")
    # A note written once the daemon runs waits out the debounce: searches waiting for it are
    # long-polls for as long as the test needs.
    with running(vault, tmp_path, debounce="10m") as daemon:
        (vault / "Pending.md").write_text("# Pending\n\nHeld back.\n", encoding="utf-8")
        load = Load(daemon.socket)
        try:
            until = time.monotonic() + HOLD
            load.start_long_polls(300, "Pending.md", wait=HOLD)
            load.start_slow_senders(100, interval=1.0, until=until)
            # Halfway, every long-poll and slow sender is in.
            load.probe_health(every=0.25, until=until - HOLD / 2)
            held = threads(daemon.process.pid)
            load.probe_health(every=0.25, until=until)
        finally:
            load.close(patience=PATIENCE)
        after = daemon.request("GET", "/v1/health")
        assert daemon.process.poll() is None

    assert len(load.health) >= 20, "the probe hardly ran"
    refused = [a for a in load.health if a.status != 200]
    assert not refused, f"{len(refused)} of {len(load.health)} not answered: {refused[:5]}"
    slowest = max(a.seconds for a in load.health)
    assert slowest < SLOW_HEALTH, f"a health check took {slowest:.1f} s"
    # Every long-poll waited its whole time, none turned away.
    assert len(load.long_polls) == 300
    outcomes = {(a.status, a.code) for a in load.long_polls}
    assert outcomes == {(503, "timeout")}, outcomes
    # Every slow sender was cut (at the request deadline, or earlier to make room).
    assert load.slow_cut >= 100, (load.slow_started, load.slow_cut)
    assert after["status"] == "ok"
    print(f"{held} threads under 300 long-polls and 100 slow senders")
    assert held <= MOST_THREADS, f"{held} threads under the load"
