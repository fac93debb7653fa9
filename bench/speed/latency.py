"""Save-to-searchable latency, idle CPU and RSS of a running `vaultd run`.

Measures, on a real daemon over its real socket:
1. idle: N edits to a small vault, one at a time; each edit's time from the write until a
   keyword search returns it (the settle time included);
2. busy: the same while the daemon performs the first index of a big vault (default
   ../shared/corpora/obsidian-hub), for as long as the edits take;
3. CPU used by the daemon over a quiet minute, and its RSS;
4. with `--finish`, the rest of the big vault's first index, then the daemon's peak RSS and
   its RSS at rest after it.

    python -m bench.speed.latency --edits 100 --busy-edits 20
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import CORPORA, REPO, SHARED
from bench.lib.results import add_record_option, record
from bench.lib.stats import rank
from harness.daemon import RunningDaemon, running

SHARED = SHARED


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory now (VmRSS) or at its peak so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure_edits(daemon: RunningDaemon, vault: Path, count: int, gap: float) -> list[float]:
    lags: list[float] = []
    target = vault / "bench-edits.md"
    for i in range(count):
        token = f"zqx{i}marker"
        target.write_text(f"# Edits\n\nEdit number {i} carries the word {token}.\n")
        written = time.monotonic()
        while True:
            hits = daemon.search(token, k=1, mode="keyword")
            if hits and hits[0]["path"] == "bench-edits.md":
                lags.append(time.monotonic() - written)
                break
            if time.monotonic() - written > 120:
                lags.append(float("inf"))
                break
            time.sleep(0.02)
        time.sleep(gap)
    return lags


def summary(lags: list[float]) -> dict[str, float]:
    ordered = sorted(lags)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 3),
        "p95": round(rank(ordered, 0.95), 3),
        "max": round(ordered[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edits", type=int, default=100)
    parser.add_argument("--busy-edits", type=int, default=20)
    parser.add_argument("--busy-vault", type=Path, default=CORPORA / "obsidian-hub")
    parser.add_argument("--debounce", default="300ms")
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument(
        "--finish",
        action="store_true",
        help="after the busy edits, let the first index finish and record RSS at rest",
    )
    parser.add_argument("--json", action="store_true")
    add_record_option(parser)
    args = parser.parse_args()
    result: dict[str, Any] = {"debounce": args.debounce}

    with tempfile.TemporaryDirectory(prefix="vaultd-latency-") as tmp:
        work = Path(tmp)
        small = work / "small"
        shutil.copytree(REPO / "examples" / "vault", small / "v")
        with running(small / "v", small, debounce=args.debounce) as daemon:
            result["idle_edits"] = summary(measure_edits(daemon, small / "v", args.edits, 0.2))
            time.sleep(3)
            pid = daemon.process.pid
            before = cpu_seconds(pid)
            time.sleep(args.idle_seconds)
            used = cpu_seconds(pid) - before
            result["idle_cpu_percent"] = round(100 * used / args.idle_seconds, 3)
            result["idle_rss_mb_small_vault"] = round(rss_mb(pid), 1)

        if args.busy_edits and args.busy_vault.exists():
            big = work / "big"
            shutil.copytree(args.busy_vault, big / "v")
            with running(big / "v", big, debounce=args.debounce, wait_ready=False) as daemon:
                time.sleep(5)  # let the first index get going
                status = daemon.request("GET", "/v1/status")
                result["busy_queue_at_start"] = status.get("indexing")
                result["busy_edits"] = summary(
                    measure_edits(daemon, big / "v", args.busy_edits, 1.0)
                )
                status = daemon.request("GET", "/v1/status")
                result["busy_notes_indexed_meanwhile"] = status["notes"]
                result["busy_rss_mb"] = round(rss_mb(daemon.process.pid), 1)
                if args.finish:
                    started = time.monotonic()
                    while True:
                        try:
                            daemon.wait_idle(timeout=60)
                            break
                        except Exception:  # not idle within the minute: ask again
                            continue
                    result["first_index_done_after_s"] = round(time.monotonic() - started, 1)
                    time.sleep(10)
                    status = daemon.request("GET", "/v1/status")
                    result["finished_notes"] = status["notes"]
                    result["finished_chunks"] = status["chunks"]
                    result["peak_rss_mb"] = round(rss_mb(daemon.process.pid, "VmHWM"), 1)
                    result["idle_rss_mb_after_index"] = round(rss_mb(daemon.process.pid), 1)

    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
    record(args.record, ["", "figure"], table(result, args.idle_seconds))


def table(result: dict[str, Any], idle_seconds: float) -> list[list[str]]:
    """The figures as docs/benchmarks.md tables them, one a row."""
    rows = []
    for name, key in (("idle daemon", "idle_edits"), ("during a first index", "busy_edits")):
        if key in result:
            edits = result[key]
            rows += [
                [f"save-to-searchable, {name}, {q}", f"{edits[q]:.3f} s"] for q in ("p50", "p95")
            ]
            rows.append(
                [f"save-to-searchable, {name}, max of {edits['n']}", f"{edits['max']:.3f} s"]
            )
    rows.append([f"CPU over {idle_seconds:g} idle seconds", f"{result['idle_cpu_percent']:.2f}%"])
    rows.append(["RSS, idle, small vault", f"{result['idle_rss_mb_small_vault']:.0f} MB"])
    for name, key in (
        ("RSS during the first index", "busy_rss_mb"),
        ("peak RSS of the first index", "peak_rss_mb"),
        ("RSS at rest after the first index", "idle_rss_mb_after_index"),
    ):
        if key in result:
            rows.append([name, f"{result[key]:,.0f} MB"])
    return rows


if __name__ == "__main__":
    main()
