"""Does the embedded Chroma store stay bounded under a long stream of writes?

Writes the same records again and again through vaultd's own `VectorStore` (embedded chromadb,
as the daemon uses it) and, every `--every` upserts, records the size of the store folder, of
`chroma.sqlite3`, the rows of Chroma's write-ahead log (the `embeddings_queue` table, counted
through a read-only connection), the elements of the collection's HNSW segment (deleted ones
included) and the size of its `data_level0.bin` and `link_lists.bin`.

Variants:
- `upsert`: each round upserts every record again, with new vectors and text (notes edited).
- `churn`: each round deletes every record and adds it again (what moves, and notes deleted
  and written again, do), with vaultd's upkeep at every checkpoint, standing in for the full
  pass after which the daemon runs it (`Upkeep.compact_if_bloated`).
- `churn-raw`: the same without upkeep: Chroma's own behaviour.

At the end the store must hold exactly the records written last (ids, documents, metadata,
vectors within 1e-5).

    python -m bench.memory.store_growth --json
    python -m bench.memory.store_growth --variant churn-raw --upserts 20000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.machine import cpu_model
from bench.lib.results import add_record_option, record
from vaultd.config import LogSection
from vaultd.index.open import installed_chromadb
from vaultd.logs import configure as configure_logs
from vaultd.storage.metadata import chunk_metadata
from vaultd.storage.vectors import Metadata, VectorStore

VARIANTS = ("upsert", "churn", "churn-raw")
WORDS = [
    "garden",
    "river",
    "archive",
    "lantern",
    "copper",
    "meadow",
    "signal",
    "harbor",
    "quartz",
    "pepper",
    "ledger",
    "orbit",
    "violet",
    "compass",
    "thunder",
    "marble",
    "willow",
    "ember",
    "canyon",
    "saddle",
    "fossil",
    "beacon",
    "walnut",
    "prism",
]


class Records:
    """`count` chunk-like records: fixed ids, fresh vectors and text on every `refresh`."""

    def __init__(self, count: int, dim: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.words = random.Random(seed)
        self.ids = [f"{i:032x}" for i in range(count)]
        self.vectors = np.zeros((count, dim), dtype=np.float32)
        self.documents: list[str] = []
        self.metadatas: list[Metadata] = []
        self.round = 0
        self.refresh()

    def refresh(self) -> None:
        self.round += 1
        vectors = self.rng.standard_normal(self.vectors.shape).astype(np.float32)
        self.vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.documents = [" ".join(self.words.choices(WORDS, k=90)) for _ in self.ids]
        self.metadatas = [
            chunk_metadata(
                path=f"folder{i % 7}/note {i // 4}.md",
                title=f"Note {i // 4}",
                tags=["project/alpha", "reading"] if i % 3 == 0 else [],
                aliases=[f"n{i // 4}"] if i % 5 == 0 else [],
                link_targets=[f"note {(i * 7) % 100}"],
                section="Notes > Part",
                headings=["Notes", "Part"],
                index=i % 4,
                start_line=1 + 10 * (i % 4),
                end_line=10 + 10 * (i % 4),
                mtime_ns=1_760_000_000_000_000_000 + self.round,
                sha256=f"{self.round:064x}",
                model_id="bench-model",
            )
            for i in range(len(self.ids))
        ]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def queue_rows(store_dir: Path) -> int:
    database = store_dir / "chroma.sqlite3"
    with closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
        db.execute("PRAGMA busy_timeout=10000")
        return int(db.execute("SELECT COUNT(*) FROM embeddings_queue").fetchone()[0])


def segment_files(store_dir: Path, name: str) -> int:
    """Bytes of every segment's `name` file (the store holds one collection here)."""
    return sum(p.stat().st_size for p in store_dir.glob(f"*/{name}"))


def measure(store: VectorStore, store_dir: Path, upserts: int, started: float) -> dict[str, Any]:
    return {
        "upserts": upserts,
        "store_bytes": folder_bytes(store_dir),
        "sqlite_bytes": (store_dir / "chroma.sqlite3").stat().st_size,
        "queue_rows": queue_rows(store_dir),
        "hnsw_elements": store.upkeep.segment_elements(),
        "data_level0_bytes": segment_files(store_dir, "data_level0.bin"),
        "link_lists_bytes": segment_files(store_dir, "link_lists.bin"),
        "seconds": round(time.perf_counter() - started, 1),
    }


def run(
    variant: str, count: int, total: int, every: int, dim: int, workdir: Path
) -> dict[str, Any]:
    store_dir = workdir / variant
    shutil.rmtree(store_dir, ignore_errors=True)
    store = VectorStore(
        collection="vaultd-bench-growth",
        vault_id=str(workdir),
        model_id="bench-model",
        path=store_dir,
    )
    records = Records(count, dim, seed=11)
    rows: list[dict[str, Any]] = []
    compactions = 0
    upserts = 0
    next_mark = every
    started = time.perf_counter()
    try:
        while upserts < total:
            if variant != "upsert" and upserts:
                store.delete(records.ids)
            store.upsert(records.ids, records.vectors, records.documents, records.metadatas)
            upserts += count
            if upserts == count or upserts >= next_mark or upserts >= total:
                if variant == "churn" and store.upkeep.compact_if_bloated():
                    compactions += 1
                row = measure(store, store_dir, upserts, started)
                row["compactions"] = compactions
                rows.append(row)
                print(_line(variant, row), file=sys.stderr, flush=True)
                while next_mark <= upserts:
                    next_mark += every
            if upserts < total:
                records.refresh()
        converged = _holds_exactly(store, records)
    finally:
        store.close()
    return {"variant": variant, "rows": rows, "converged": converged}


def _holds_exactly(store: VectorStore, records: Records) -> bool:
    """The store holds the records written last, and nothing else."""
    if store.ids() != set(records.ids):
        return False
    got = store.get(records.ids, with_vectors=True)
    for i, chunk_id in enumerate(records.ids):
        record = got[chunk_id]
        if record["document"] != records.documents[i]:
            return False
        if record["metadata"] != dict(records.metadatas[i]):
            return False
        if not np.allclose(record["vector"], records.vectors[i], atol=1e-5):
            return False
    return True


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f}"


def _line(variant: str, row: dict[str, Any]) -> str:
    return (
        f"{variant:9} {row['upserts']:>8} {_mb(row['store_bytes']):>9} "
        f"{_mb(row['sqlite_bytes']):>9} {row['queue_rows']:>7} "
        f"{row['hnsw_elements'] if row['hnsw_elements'] is not None else '-':>8} "
        f"{_mb(row['data_level0_bytes']):>9} {row['link_lists_bytes'] / 1e3:>9.1f} "
        f"{row['compactions']:>4} {row['seconds']:>8}"
    )


def _cells(variant: str, row: dict[str, Any]) -> list[str]:
    elements = row["hnsw_elements"]
    return [
        variant,
        f"{row['upserts']:,}",
        _mb(row["store_bytes"]),
        _mb(row["sqlite_bytes"]),
        f"{row['queue_rows']:,}",
        "-" if elements is None else f"{elements:,}",
        _mb(row["data_level0_bytes"]),
        f"{row['link_lists_bytes'] / 1e3:.1f}",
        str(row["compactions"]),
        str(row["seconds"]),
    ]


HEADER = (
    f"{'variant':9} {'upserts':>8} {'store MB':>9} {'sqlite MB':>9} {'WAL':>7} "
    f"{'elements':>8} {'level0 MB':>9} {'links kB':>9} {'cmp':>4} {'seconds':>8}"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", choices=(*VARIANTS, "all"), default="all")
    parser.add_argument("--records", type=int, default=2000, help="records written each round")
    parser.add_argument("--upserts", type=int, default=100_000, help="upserts per variant")
    parser.add_argument("--every", type=int, default=10_000, help="upserts between two rows")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    add_record_option(parser)
    args = parser.parse_args()
    # Compactions are logged; stdout is kept for the results.
    configure_logs(LogSection(level="info", format="console"), sys.stderr)

    variants = VARIANTS if args.variant == "all" else (args.variant,)
    workdir = Path(tempfile.mkdtemp(prefix="vaultd-growth-"))
    print(HEADER, file=sys.stderr)
    try:
        results = [
            run(v, args.records, args.upserts, args.every, args.dim, workdir) for v in variants
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "machine": cpu_model(),
        "chromadb": installed_chromadb(),
        "records": args.records,
        "upserts": args.upserts,
        "dim": args.dim,
        "results": results,
    }
    columns = ["variant", "upserts", "store MB", "sqlite MB", "WAL", "elements", "level0 MB"]
    rows = [_cells(result["variant"], row) for result in results for row in result["rows"]]
    record(args.record, [*columns, "links kB", "compactions", "seconds"], rows)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(
        f"{report['machine']}, chromadb {report['chromadb']}, {args.records} records, "
        f"{args.dim}-d vectors"
    )
    print(HEADER)
    for result in results:
        for row in result["rows"]:
            print(_line(result["variant"], row))
        print(f"{result['variant']}: store holds exactly the last records: {result['converged']}")


if __name__ == "__main__":
    main()
