"""What a second OpenBLAS thread buys the exact copy's product, and what it costs.

    python -m bench.speed.blas_threads [--rows 26469] [--record NAME]

The product a vector search makes (`vaultd.storage.exact`): one query against a matrix of
`--rows` unit vectors of 384 dimensions (obsidian-hub's 26,469 passages by default, 40 MB),
timed in a fresh process for each OpenBLAS setting (the thread count is read when numpy
loads), with searches back to back and then a gap of 4 ms and of 50 ms between them, as a
person typing or reading would leave. Each row: the median wall time of a product and the
process's CPU time per product, the gap included (what the machine gave up for it).

OpenBLAS's idle threads spin for a while after each product before they sleep, so that the
next one starts at once; `OPENBLAS_THREAD_TIMEOUT` shortens the spin.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from bench.lib.results import add_record_option, record

SETTINGS = (
    {"OPENBLAS_NUM_THREADS": "1"},
    {"OPENBLAS_NUM_THREADS": "2"},
    {"OPENBLAS_NUM_THREADS": "2", "OPENBLAS_THREAD_TIMEOUT": "4"},
)
GAPS = (0.0, 0.004, 0.05)


def measure(rows: int) -> list[dict[str, float]]:
    """In this process, as its environment set OpenBLAS up: a row a gap."""
    import numpy as np

    rng = np.random.default_rng(53)
    matrix = rng.standard_normal((rows, 384), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    query = matrix[0].copy()
    for _ in range(50):
        matrix @ query
    out = []
    for gap in GAPS:
        times = []
        n = 200 if gap < 0.05 else 40
        used = _cpu()
        for _ in range(n):
            if gap:
                time.sleep(gap)
            started = time.perf_counter()
            matrix @ query
            times.append(time.perf_counter() - started)
        times.sort()
        cpu = (_cpu() - used) / n
        out.append({"gap_ms": gap * 1000, "median_ms": times[n // 2] * 1000, "cpu_ms": cpu * 1000})
    return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=26_469)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_record_option(parser)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.rows)))
        return 0
    table = []
    for setting in SETTINGS:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
        done = subprocess.run(
            [sys.executable, "-m", "bench.speed.blas_threads", "--child", "--rows", str(args.rows)],
            env={**env, **setting},
            capture_output=True,
            text=True,
            check=True,
        )
        label = ", ".join(f"{k.removeprefix('OPENBLAS_').lower()} {v}" for k, v in setting.items())
        for row in json.loads(done.stdout):
            print(label, json.dumps(row))
            table.append(
                [
                    label,
                    f"{row['gap_ms']:g} ms",
                    f"{row['median_ms']:.2f} ms",
                    f"{row['cpu_ms']:.2f} ms",
                ]
            )
    head = ["OpenBLAS", "gap between products", "product, median", "CPU per product"]
    record(args.record, head, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
