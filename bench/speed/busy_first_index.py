"""A first index beside a busy machine: how much the governor's yielding slows it, and that it ends.

    python -m bench.speed.busy_first_index [--vault DIR] [--burners-per-core 2] [--record NAME]

A cold `vaultd run` on a fresh data directory indexes `--vault` (obsidian-help/en by default)
three times: with no pacing (`yield_above = 1`, the pace the machine allows), then under the
default pacing (`[embedding] yield_above = 0.5`, `cpu_budget = 1`) with nothing added, then
with the default pacing beside `--burners-per-core` CPU burners per core (`python -c "while
True: pass"`), which keep other programs' share of the cores at 100% from before the daemon
starts to after it is done. On a machine shared with other work the second run may be slowed
too: its "time slowed" column says how much. Each run is timed from the spawn to the health
turning `ok` (the first full pass done), and status is read every second meanwhile for the
share of that time the governor said bulk work was slowed for a busy machine.

Prints one JSON object; docs/benchmarks.md ("A first index beside a busy machine") records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.lib.machine import machine
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from harness.daemon import short_socket_dir, start, write_config
from vaultd.daemon.governor import YIELD_FLOOR

DEFAULT_PACING = "\n[embedding]\nyield_above = 0.5\ncpu_budget = 1.0\n"
NO_PACING = "\n[embedding]\nyield_above = 1.0\ncpu_budget = 1.0\n"


def first_index(
    vault: Path, work: Path, burners: int, timeout: float, pacing: str = DEFAULT_PACING
) -> dict[str, Any]:
    """One cold first index of `vault` beside `burners` CPU burners: seconds and pacing."""
    work.mkdir(parents=True)
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(work / "vaultd.toml", vault, work / "data", socket, extra=pacing)
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(burners)
    ]
    samples: list[bool] = []
    done = threading.Event()
    try:
        if spinning:
            time.sleep(2)  # others' share is measured over a second or more
        began = time.monotonic()
        daemon = start(config, socket, work / "vaultd.log", wait_ready=False)
        try:

            def sample() -> None:
                while not done.wait(1.0):
                    try:
                        governor = daemon.request("GET", "/v1/status")["governor"]
                    except Exception:
                        continue
                    samples.append(bool(governor["yielding"]))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            while True:
                if daemon.process.poll() is not None:
                    raise RuntimeError(f"vaultd run exited:\n{daemon.log_text()}")
                if daemon.request("GET", "/v1/health")["status"] == "ok":
                    break
                if time.monotonic() - began > timeout:
                    raise RuntimeError(f"no first index within {timeout:.0f} s")
                time.sleep(0.5)
            seconds = time.monotonic() - began
            done.set()
            sampler.join()
            status = daemon.request("GET", "/v1/status")
        finally:
            done.set()
            daemon.stop()
    finally:
        for burner in spinning:
            burner.kill()
            burner.wait()
    slowed = daemon.log_text().count("bulk indexing slows down")
    return {
        "pacing": "default" if pacing == DEFAULT_PACING else "none",
        "burners": burners,
        "seconds": round(seconds, 1),
        "notes": status["notes"],
        "chunks": status["chunks"],
        "slowed_share": round(sum(samples) / len(samples), 2) if samples else 0.0,
        "slowed_logged": slowed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--vault", type=Path, default=CORPORA / "obsidian-help" / "en")
    parser.add_argument("--burners-per-core", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=7200)
    add_record_option(parser)
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory(prefix="busy-first-index-") as tmp:
        burners = args.burners_per_core * cores
        plan = [(NO_PACING, 0), (DEFAULT_PACING, 0), (DEFAULT_PACING, burners)]
        for n, (pacing, beside) in enumerate(plan):
            work = Path(tmp) / f"run{n}"
            run = first_index(args.vault, work, beside, args.timeout, pacing)
            print(json.dumps(run), file=sys.stderr)
            runs.append(run)
    unpaced, quiet, busy = runs
    result = {
        "vault": str(args.vault),
        "machine": machine(),
        "floor": YIELD_FLOOR,
        "load_before": [round(x, 2) for x in load_before],
        "unpaced": unpaced,
        "quiet": quiet,
        "busy": busy,
        "slowdown": round(busy["seconds"] / unpaced["seconds"], 2),
    }
    print(json.dumps(result, indent=2))
    rows = [
        [
            "yield_above = 1 (never slows)" if run["pacing"] == "none" else "yield_above = 0.5",
            "nothing added" if run["burners"] == 0 else f"{run['burners']} CPU burners",
            f"{run['notes']:,} / {run['chunks']:,}",
            f"{run['seconds']:.1f} s",
            f"{run['slowed_share']:.0%}",
        ]
        for run in runs
    ]
    record(
        args.record,
        ["pacing", "beside the daemon", "notes / chunks", "first index", "time slowed"],
        rows,
        align=["left", "left", "right", "right", "right"],
        notes=(
            f"floor {YIELD_FLOOR:.0%}; beside the burners {result['slowdown']}x the unpaced "
            f"time; load average before the runs {result['load_before'][0]}"
        ),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
