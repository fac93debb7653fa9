"""A real daemon's restart before and after the stat detection of issue 35, in one run.

    python -m bench.speed.detect_restart --before TREE [--vault VAULT] [--work DIR]

TREE is a checkout of vaultd before the change (`git archive af7ac19 | tar -x -C TREE`); its
`vaultd run` is started with TREE first on PYTHONPATH. VAULT (a copy is indexed, default
../shared/corpora/obsidian-help) goes to WORK/vault, the index to WORK/data:

1. The old code's first index (skipped when WORK/data exists), and a restart of it.
2. The new code's first start on that schema 8 manifest: it reads every note once (no ctime,
   inode or hash time recorded yet) and embeds nothing.
3. The new code's restart, and a `vaultd reindex` (every note read) on it.

Each start is timed from spawn until the daemon is ready and idle; the reads and embeddings
are its status's counters. Prints a JSON object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bench.lib.machine import cpu_model
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from bench.lib.workdir import vault_copy
from harness.daemon import RunningDaemon, short_socket_dir, start, write_config

DEFAULT_VAULT = CORPORA / "obsidian-help"


def counters(daemon: RunningDaemon) -> dict[str, int]:
    status = daemon.request("GET", "/v1/status")
    return {k: int(status[k]) for k in ("notes", "embedded_total", "notes_read_total")}


def timed_start(config: Path, socket: Path, log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Spawn, wait until ready and idle, read the counters, stop."""
    spawned = time.monotonic()
    daemon = start(config, socket, log, env=env, wait_ready=True, ready_timeout=3600)
    try:
        daemon.wait_idle(timeout=3600)
        out: dict[str, Any] = {"spawn_to_idle_s": round(time.monotonic() - spawned, 2)}
        out.update(counters(daemon))
        out["load"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        daemon.stop(signal.SIGTERM, timeout=120)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="vaultd before the change")
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT)
    parser.add_argument("--work", type=Path, default=Path("/tmp/vaultd-detect-restart"))
    add_record_option(parser)
    args = parser.parse_args()
    work = args.work.resolve()
    vault = vault_copy(args.vault, work)
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(work / "vaultd.toml", vault, work / "data", socket)
    log = work / "vaultd.log"
    old = {"PYTHONPATH": str(args.before.resolve())}
    new = {"PYTHONPATH": ""}
    out: dict[str, Any] = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "vault": str(args.vault),
    }
    if not (work / "data").exists():
        out["first_index_before"] = timed_start(config, socket, log, old)
    out["restart_before"] = timed_start(config, socket, log, old)
    out["first_start_after_upgrade"] = timed_start(config, socket, log, new)
    out["restart_after"] = timed_start(config, socket, log, new)
    daemon = start(config, socket, log, env=new, wait_ready=True, ready_timeout=3600)
    try:
        daemon.wait_idle(timeout=3600)
        before = counters(daemon)
        began = time.monotonic()
        daemon.request("POST", "/v1/reindex", {"paths": []})
        daemon.wait_idle(timeout=3600)
        after = counters(daemon)
        out["reindex_all_after"] = {
            "seconds": round(time.monotonic() - began, 2),
            "notes_read": after["notes_read_total"] - before["notes_read_total"],
            "embedded": after["embedded_total"] - before["embedded_total"],
        }
    finally:
        daemon.stop(signal.SIGTERM, timeout=120)
    json.dump(out, sys.stdout, indent=2)
    print()
    rows = [
        [name, f"{out[key]['spawn_to_idle_s']:.1f}"]
        + [f"{out[key][count]:,}" for count in ("notes_read_total", "embedded_total")]
        for key, name in (
            ("first_index_before", "first index, before"),
            ("restart_before", "restart, before"),
            ("first_start_after_upgrade", "first start after the upgrade"),
            ("restart_after", "restart, after"),
        )
        if key in out
    ]
    reindex = out["reindex_all_after"]
    rows.append(
        ["`vaultd reindex` on the running daemon, after", f"{reindex['seconds']:.1f}"]
        + [f"{reindex[count]:,}" for count in ("notes_read", "embedded")]
    )
    columns = ["spawn to ready and idle, nothing changed", "seconds", "notes read", "embedded"]
    record(args.record, columns, rows)


if __name__ == "__main__":
    main()
