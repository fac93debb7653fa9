"""How good is the time left that `vaultd index` shows during a first index?

    python -m bench.quality.eta [--vault DIR]

Runs a first `vaultd index` of VAULT (default ../shared/corpora/obsidian-hub, copied to a
temporary directory) with its progress lines on stderr (a line every 5 s when stderr is not
a terminal; the bar on a terminal uses the same average rate). Every line with an estimate is
compared with what really happened: the error is (estimated - real) / real time left, where
the real time left runs until the process exits. Prints the error at 10, 25, 50, 75 and 90%
done, and the largest error of all estimates from 10% done on (and from 10 to 95%, and in
seconds).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.installed import vaultd_executable
from bench.lib.machine import machine
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record, report_rows

DEFAULT_VAULT = CORPORA / "obsidian-hub"
LINE = re.compile(
    r"^index: (\d+)% \(([\d.]+) of ([\d.]+) (MiB|KiB) of text\)(?:, about (.+) left)?"
)
MARKS = (10, 25, 50, 75, 90)


def seconds(text: str) -> float:
    """`1 h 05 min`, `5 min 03 s`, `42 s` (as vaultd prints them)."""
    total = 0.0
    for number, unit in re.findall(r"(\d+) (h|min|s)\b", text):
        total += int(number) * {"h": 3600, "min": 60, "s": 1}[unit]
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT)
    parser.add_argument(
        "--trace", type=Path, help="write every progress line as JSON (seconds, percent, estimate)"
    )
    add_record_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vaultd-eta-") as tmp:
        work = Path(tmp)
        shutil.copytree(args.vault, work / "vault")
        config = work / "vaultd.toml"
        config.write_text(
            f'[vault]\npath = "{work / "vault"}"\n[store]\npath = "{work / "data"}"\n'
            '[log]\nlevel = "warning"\n',
            encoding="utf-8",
        )
        started = time.monotonic()
        process = subprocess.Popen(
            [vaultd_executable(), "index", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stderr is not None
        estimates: list[tuple[float, float, float]] = []  # (at, percent done, estimate)
        trace: list[tuple[float, float, float | None]] = []
        for line in process.stderr:
            match = LINE.match(line.strip())
            if not match:
                continue
            done, total = float(match.group(2)), float(match.group(3))
            estimate = seconds(match.group(5)) if match.group(5) else None
            trace.append((time.monotonic() - started, 100 * done / total, estimate))
            if estimate is not None:
                estimates.append((time.monotonic(), 100 * done / total, estimate))
        process.wait()
        ended = time.monotonic()
    if process.returncode != 0 or not estimates:
        sys.exit(f"vaultd index exited with {process.returncode} and {len(estimates)} estimates")

    def error(at: float, estimate: float) -> float:
        real = ended - at
        return (estimate - real) / real

    if args.trace:
        args.trace.write_text(json.dumps(trace), encoding="utf-8")
    complete = [at for at, pct, _ in trace if pct >= 100]
    result: dict[str, Any] = {
        "vault": str(args.vault),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "first_index_s": round(ended - started, 1),
        # From the first line at 100% to the exit: work the index phase does not count.
        "after_100pct_s": round(ended - started - complete[0], 1) if complete else None,
        "estimates": len(estimates),
        "error_at": {},
        "max_abs_error_from_10pct": round(
            max(abs(error(at, est)) for at, pct, est in estimates if pct >= 10), 3
        ),
        # The last 5% is the last seconds, where a second off is a large share.
        "max_abs_error_10_to_95pct": round(
            max(abs(error(at, est)) for at, pct, est in estimates if 10 <= pct <= 95), 3
        ),
        "max_abs_error_s_from_10pct": round(
            max(abs(est - (ended - at)) for at, pct, est in estimates if pct >= 10), 1
        ),
    }
    for mark in MARKS:
        at, pct, est = min(estimates, key=lambda e: abs(e[1] - mark))
        result["error_at"][f"{mark}%"] = {
            "done_pct": round(pct, 1),
            "estimate_s": round(est),
            "real_s": round(ended - at),
            "error": round(error(at, est), 3),
        }
    print(json.dumps(result, indent=2))
    record(args.record, ["figure", "value"], report_rows(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
