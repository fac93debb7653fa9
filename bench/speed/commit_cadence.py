"""What recording vectors every few seconds costs a first index, against once a batch.

    python -m bench.speed.commit_cadence [--vault DIR] [--repeat 2]

A first `vaultd index` of the vault (obsidian-help/en by default) is run in this process
through `open_index` and `Indexer.reconcile`, each time on a fresh data directory, with the
indexer's two cadences alternating (ABBA...: drift on a shared machine hits both alike):

- "batch": the vectors of a batch recorded once, when the whole batch is embedded (before
  `COMMIT_CHUNKS` / `COMMIT_SECONDS`: on a vault under 4,096 chunks, once in all);
- "cadence": recorded every `COMMIT_CHUNKS` texts or `COMMIT_SECONDS` of embedding, whichever
  comes first, as `vaultd index` does now.

Prints each run's seconds (the pass, as `index --json` reports them) and the manifest commits
of vectors it made, then the medians and their ratio. docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.machine import cpu_model
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from vaultd.config import load_config
from vaultd.index.indexer import COMMIT_CHUNKS, COMMIT_SECONDS
from vaultd.index.open import open_index
from vaultd.index.passes import Pacing
from vaultd.layout import private_umask
from vaultd.logs import configure

DEFAULT_VAULT = CORPORA / "obsidian-help" / "en"

#: Each cadence as (texts, seconds) between two records of the vectors.
CADENCES: dict[str, tuple[int, float]] = {
    "batch": (1 << 30, float("inf")),
    "cadence": (COMMIT_CHUNKS, COMMIT_SECONDS),
}


def first_index(work: Path, vault: Path, run: int, cadence: str) -> dict[str, Any]:
    store = work / f"store-{run}"
    config_file = work / f"config-{run}.toml"
    config_file.write_text(
        f"[vault]\npath = {json.dumps(str(vault))}\n[store]\npath = {json.dumps(str(store))}\n"
        '[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    config = load_config(config_file, env=os.environ)
    configure(config.log)
    texts, seconds = CADENCES[cadence]
    with open_index(config, pacing=Pacing(commit_chunks=texts, commit_seconds=seconds)) as idx:
        indexer = idx.indexer
        commits = 0
        add_vectors = idx.manifest.add_vectors

        def counted(*args: Any, **kwargs: Any) -> None:
            nonlocal commits
            commits += 1
            add_vectors(*args, **kwargs)

        idx.manifest.add_vectors = counted  # type: ignore[method-assign]
        started = time.perf_counter()
        summary = indexer.reconcile()
        wall = time.perf_counter() - started
    shutil.rmtree(store, ignore_errors=True)
    return {
        "cadence": cadence,
        "seconds": round(summary.seconds, 2),
        "wall": round(wall, 2),
        "chunks_embedded": summary.chunks_embedded,
        "commits": commits,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT, help="vault to copy")
    parser.add_argument("--repeat", type=int, default=2, help="first indexes of each cadence")
    add_record_option(parser)
    args = parser.parse_args(argv)
    if not args.vault.is_dir():
        print(f"no such vault: {args.vault}", file=sys.stderr)
        return 2
    private_umask()  # as the command does: the data directory is owner-only from the start
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vaultd-bench-") as tmp:
        work = Path(tmp)
        vault = work / "vault"
        shutil.copytree(args.vault, vault)
        order = ["batch", "cadence"]
        for r in range(max(1, args.repeat)):
            for cadence in order if r % 2 == 0 else order[::-1]:
                runs.append(first_index(work, vault, len(runs), cadence))
                print(json.dumps(runs[-1]), flush=True)
    medians = {
        c: statistics.median(r["seconds"] for r in runs if r["cadence"] == c) for c in CADENCES
    }
    print(f"vault     {args.vault} (copied)")
    print(f"machine   {os.cpu_count()} cores, {cpu_model()}; load {os.getloadavg()[0]:.1f}")
    print(f"cadence   every {COMMIT_CHUNKS} texts or {COMMIT_SECONDS:g} s of embedding")
    for cadence, seconds in medians.items():
        print(f"{cadence:<9} median {seconds:.2f} s")
    print(f"ratio     cadence / batch = {medians['cadence'] / medians['batch']:.3f}")
    rows = []
    for cadence, seconds in medians.items():
        mine = [f"{r['seconds']:.2f} s" for r in runs if r["cadence"] == cadence]
        rows.append([cadence, *mine, f"{seconds:.2f} s"])
    repeats = [f"run {i}" for i in range(1, len(rows[0]) - 1)]
    record(args.record, ["first index", *repeats, "median"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
