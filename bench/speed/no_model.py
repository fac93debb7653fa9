"""A first index with the model taken out: what vaultd and Chroma cost beside the embeddings.

    python -m bench.speed.no_model [--work /tmp/vaultd-big]

Takes the data directory of an earlier full run (bench/speed/big_vault.py's WORK/data), keeps only
its manifest's vectors (bench/speed/server_mode.py's `vectors_only`: no note, no chunk, an empty
store) and times `vaultd index` of WORK/vault into it. Every note is read, hashed, parsed,
chunked and written to Chroma and the manifest; no text reaches the model. Reports the wall
time, the CPU time of each kind of thread (from /proc, every 2 s: vaultd's own Python threads
show as `vaultd`, Chroma's as `tokio-rt-worker` and `sqlx-sqlite-wor`) and the size of the
store afterwards.

Prints a JSON object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.lib.machine import machine
from bench.lib.results import add_record_option, record, report_rows
from bench.speed.server_mode import vectors_only

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, tuple[str, float]]:
    """CPU seconds so far of each live thread of `pid`: {tid: (name, seconds)}."""
    out: dict[str, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / CLOCK_TICKS)
    return out


def size_mb(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/vaultd-big"))
    add_record_option(parser)
    args = parser.parse_args()
    work: Path = args.work
    source, target = work / "data", work / "no-model"
    if not (source / "vaultd.db").exists():
        sys.exit(f"{source} holds no index: run bench/speed/big_vault.py --work {work} first")
    shutil.rmtree(target, ignore_errors=True)
    vectors_only(source, target)
    config = work / "no-model.toml"
    config.write_text(
        f'[vault]\npath = "{work / "vault"}"\n[store]\npath = "{target}"\n'
        '[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    vaultd = Path(sys.executable).with_name("vaultd")
    started = time.monotonic()
    process = subprocess.Popen(
        [str(vaultd), "index", "--config", str(config), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    # Threads that end early would be lost from a last look: keep each thread's latest figure.
    seen: dict[str, tuple[str, float]] = {}
    while process.poll() is None:
        with contextlib.suppress(OSError):  # it may end between two looks
            seen.update(thread_cpu(process.pid))
        time.sleep(2)
    wall = time.monotonic() - started
    stdout = process.stdout.read() if process.stdout else ""
    if process.returncode != 0:
        sys.exit(f"vaultd index failed ({process.returncode})")
    by_kind: dict[str, float] = {}
    for name, seconds in seen.values():
        by_kind[name] = round(by_kind.get(name, 0.0) + seconds, 1)
    summary = json.loads(stdout)
    result = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "wall_s": round(wall, 1),
        "cpu_s_by_thread": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        "notes": summary["notes_changed"],
        "chunk_records": summary["chunks_reused"] + summary["chunks_embedded"],
        "chunks_embedded": summary["chunks_embedded"],
        "store_mb": size_mb(target / "chroma"),
        "manifest_mb": round(size_mb(target) - size_mb(target / "chroma"), 1),
    }
    print(json.dumps(result, indent=2))
    record(args.record, ["figure", "value"], report_rows(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
