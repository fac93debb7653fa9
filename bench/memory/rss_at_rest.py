"""Resident memory of a daemon at rest on an indexed vault.

Starts `vaultd run` on a data directory (default: the obsidian-hub index that
`bench/speed/socket_latency.py` builds in /tmp/vaultd-hub), waits until it is idle (a whole first
index, if the directory holds only a manifest's vectors), runs a few searches, leaves it alone
for ten seconds, and reads its VmRSS and VmHWM from /proc.

    python -m bench.memory.rss_at_rest --workdir /tmp/vaultd-hub
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.lib.results import add_record_option, record, report_rows
from harness.daemon import short_socket_dir, start, write_config


def memory_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vaultd-hub"))
    add_record_option(parser)
    args = parser.parse_args()
    vault, data = args.workdir / "vault", args.workdir / "data"
    if not (data / "vaultd.db").exists():
        parser.error(f"no index in {data}: run bench/speed/socket_latency.py --workdir first")
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(args.workdir / "rss.toml", vault, data, socket)
    daemon = start(config, socket, args.workdir / "rss.log", wait_ready=False)
    try:
        started = time.monotonic()
        while True:
            try:
                daemon.wait_idle(timeout=60)
                break
            except Exception:  # not idle within the minute (a first index): ask again
                continue
        indexing_s = round(time.monotonic() - started, 1)
        for query in ("how do I sync my vault", "daily notes template", "graph view"):
            daemon.search(query, k=10)
        time.sleep(10)
        status = daemon.request("GET", "/v1/status")
        pid = daemon.process.pid
        report = {
            "notes": status["notes"],
            "chunks": status["chunks"],
            "embedded": status.get("embedded_total"),
            "until_idle_s": indexing_s,
            "rss_mb": memory_mb(pid, "VmRSS"),
            "peak_rss_mb": memory_mb(pid, "VmHWM"),
        }
        print(json.dumps(report, indent=2))
        record(args.record, ["figure", "value"], report_rows(report))
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
