"""Chroma's own floor: the CPU an embedded Chroma spends to take a vault's chunk records.

    python -m bench.speed.chroma_floor [--work /tmp/vaultd-big] [--bare-seconds S]

Takes the chunk records and vectors of an earlier full run (bench/speed/big_vault.py's WORK/data
manifest) and writes them, in the manifest's order and in batches of 1,024 as a first index
does, into a fresh `PersistentClient` collection (cosine, Chroma's default HNSW settings, as
vaultd creates it), twice:

- `ids_and_vectors`: each record with its id and vector only: no document, no metadata. No
  store of one record per chunk can cost less than this.
- `as_vaultd_writes`: with the chunk's text as the document and part of vaultd's metadata
  (path, title, section, lines, one tag); vaultd's own records carry more, so cost more.

No model runs, nothing else runs in the process, and the CPU time is the process's own (all
of Chroma's threads). With `--bare-seconds` (the bare estimate of bench/speed/big_vault.py's same
vault) it also prints the CPU a first index may spend beside the model for acceptance 1 of
the scale issue (total time at most 1.05 times the bare time, on all cores).

Prints a JSON object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.machine import cpu_model
from bench.lib.results import add_record_option, record, report_rows

BATCH = 1024


def records(db: Path) -> tuple[list[tuple[Any, ...]], dict[str, np.ndarray]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT id, hash, path, title, section, start_line, end_line, text FROM chunks "
            "ORDER BY n"
        ).fetchall()
        vectors = {
            h: np.frombuffer(blob, dtype=np.float32)
            for h, blob in conn.execute("SELECT hash, vector FROM vectors")
        }
    return rows, vectors


def write_all(
    path: Path, rows: list[tuple[Any, ...]], vectors: dict[str, np.ndarray], full: bool
) -> dict[str, float]:
    import chromadb
    from chromadb.config import Settings

    shutil.rmtree(path, ignore_errors=True)
    client = chromadb.PersistentClient(
        path=str(path), settings=Settings(anonymized_telemetry=False)
    )
    collection = client.get_or_create_collection(
        "floor", metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    started, before = time.monotonic(), os.times()
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        embeddings = np.stack([vectors[r[1]] for r in batch])
        if full:
            collection.upsert(
                ids=[r[0] for r in batch],
                embeddings=embeddings,
                documents=[r[7] for r in batch],
                metadatas=[
                    {
                        "path": r[2],
                        "title": r[3],
                        "section": r[4],
                        "start_line": r[5],
                        "end_line": r[6],
                        "tags": ["bench"],
                    }
                    for r in batch
                ],
            )
        else:
            collection.upsert(ids=[r[0] for r in batch], embeddings=embeddings)
    after = os.times()
    cpu = (after.user + after.system) - (before.user + before.system)
    assert collection.count() == len(rows)
    return {
        "wall_s": round(time.monotonic() - started, 1),
        "cpu_s": round(cpu, 1),
        "cpu_ms_per_record": round(1000 * cpu / len(rows), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/vaultd-big"))
    parser.add_argument(
        "--bare-seconds",
        type=float,
        help="bench/speed/big_vault.py's bare estimate for the same vault: prints the CPU a first "
        "index may spend beside the model at 1.05 times it",
    )
    add_record_option(parser)
    args = parser.parse_args()
    db = args.work / "data" / "vaultd.db"
    if not db.exists():
        sys.exit(f"{db} does not exist: run bench/speed/big_vault.py --work {args.work} first")
    rows, vectors = records(db)
    cores = os.cpu_count() or 1
    result: dict[str, Any] = {
        "machine": f"{cores} cores, {cpu_model()}",
        "date": time.strftime("%Y-%m-%d"),
        "records": len(rows),
        "unique_vectors": len({r[1] for r in rows}),
    }
    with tempfile.TemporaryDirectory(prefix="vaultd-chroma-floor-") as tmp:
        for name, full in (("ids_and_vectors", False), ("as_vaultd_writes", True)):
            result[name] = write_all(Path(tmp) / name, rows, vectors, full)
    if args.bare_seconds:
        budget = 0.05 * args.bare_seconds * cores
        result["budget_beside_the_model_cpu_s"] = round(budget, 1)
        result["floor_over_budget"] = round(result["ids_and_vectors"]["cpu_s"] / budget, 2)
    print(json.dumps(result, indent=2))
    record(args.record, ["figure", "value"], report_rows(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
