"""Health under the load that once locked everything else out (issue 35, finding 4).

300 searches long-polling with `wait_for` (a note held back by a long debounce, so each waits
its whole `--hold`), 100 slow senders trickling a byte a second (sent again each time the
daemon cuts them), and a probe asking for health (and every fourth time status) on a fresh
connection every `--every` seconds, all at once, against a real daemon on a small vault.
With `--burn`, a CPU burner per core runs beside it.

    python -m bench.soak.starvation --hold 60 --burn
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.lib.results import add_record_option, record, report_rows
from harness.daemon import running
from harness.load import Load
from harness.vaults import write_vault


def burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hold", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--long-polls", type=int, default=300)
    parser.add_argument("--slow", type=int, default=100)
    parser.add_argument("--every", type=float, default=0.1, help="seconds between probes")
    parser.add_argument("--burn", action="store_true", help="a CPU burner per core beside it")
    add_record_option(parser)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="vd-starve-") as work:
        root = Path(work)
        vault = write_vault(root / "vault")
        with running(vault, root, debounce="10m") as daemon:
            (vault / "Pending.md").write_text("# Pending\n\nHeld back.\n", encoding="utf-8")
            burners = []
            if args.burn:
                stop_at = time.monotonic() + args.hold + 5
                for _ in range(os.cpu_count() or 1):
                    burner = multiprocessing.Process(target=burn, args=(stop_at,))
                    burner.start()
                    burners.append(burner)
            load = Load(daemon.socket)
            started = time.monotonic()
            try:
                until = started + args.hold
                load.start_long_polls(args.long_polls, "Pending.md", wait=args.hold)
                load.start_slow_senders(args.slow, interval=1.0, until=until)
                load.probe_health(every=args.every, until=until)
            finally:
                load.close(patience=args.hold + 120)
                for burner in burners:
                    burner.join()
            loadavg = os.getloadavg()[0]
            alive = daemon.process.poll() is None

    seconds = sorted(a.seconds for a in load.health)
    p99 = seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))]
    outcomes: dict[str, int] = {}
    for answer in load.long_polls:
        key = f"{answer.status} {answer.code}".strip()
        outcomes[key] = outcomes.get(key, 0) + 1
    report = {
        "cores": os.cpu_count(),
        "burners": len(burners),
        "loadavg_1min_after": round(loadavg, 2),
        "hold_s": args.hold,
        "health_checks": len(seconds),
        "health_not_200": sum(1 for a in load.health if a.status != 200),
        "health_ms": {
            "p50": round(statistics.median(seconds) * 1000, 1),
            "p99": round(p99 * 1000, 1),
            "max": round(seconds[-1] * 1000, 1),
        },
        "health_over_1s": sum(1 for s in seconds if s > 1.0),
        "long_polls": outcomes,
        "slow_requests_started": load.slow_started,
        "slow_requests_cut": load.slow_cut,
        "daemon_alive": alive,
    }
    print(json.dumps(report, indent=2))
    record(args.record, ["figure", "value"], report_rows(report))


if __name__ == "__main__":
    main()
