"""What vaultd's exact vector search finds and costs, against Chroma's HNSW graph alone.

On a copy of an index's Chroma store (`DATA/chroma` of any vaultd index: the copy keeps the
original untouched, even under a running daemon): every stored vector (or a sample) is used
as a query, and the 10 nearest each search returns are compared with the exact 10 nearest
(every stored vector scored). Reports the share of the exact 10 found, the records a search
for their own vector does not return, the mean time of one query on each path (the query
already embedded), the time to make vaultd's copy of the vectors on the first search, and
its size. Usage:

    python -m bench.quality.exact_search --store DATA/chroma [--queries 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.lib.results import add_record_option, record
from bench.lib.tables import markdown
from vaultd.storage.vectors import VectorStore

K = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--store", type=Path, required=True, help="an index's DATA/chroma")
    parser.add_argument("--queries", type=int, default=0, help="a sample (0: every record)")
    add_record_option(parser)
    args = parser.parse_args(argv)
    import chromadb

    with tempfile.TemporaryDirectory(prefix="vaultd-exact-") as scratch:
        copy = Path(scratch) / "chroma"
        shutil.copytree(args.store, copy)
        client = chromadb.PersistentClient(path=str(copy))
        name = client.list_collections()[0].name
        collection = client.get_collection(name)
        meta = collection.metadata or {}
        got = collection.get(include=["embeddings"])
        ids, vectors = list(got["ids"]), np.asarray(got["embeddings"], dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        rows = np.arange(len(ids))
        if args.queries and args.queries < len(ids):
            rows = np.random.default_rng(35).choice(len(ids), args.queries, replace=False)
        exact = [{ids[j] for j in np.argsort(-(vectors @ vectors[i]))[:K]} for i in rows]

        collection.query(query_embeddings=[vectors[0]], n_results=K, include=[])  # load it
        started = time.perf_counter()
        graph = [
            collection.query(query_embeddings=[vectors[i]], n_results=K, include=[])["ids"][0]
            for i in rows
        ]
        graph_ms = (time.perf_counter() - started) / len(rows) * 1000
        del collection
        client.clear_system_cache()

        store = VectorStore(
            collection=name,
            vault_id=str(meta.get("vaultd:vault", "")),
            model_id=str(meta.get("vaultd:model", "")),
            path=copy,
        )
        try:
            started = time.perf_counter()
            store.query(vectors[0], K)  # makes the copy
            copy_s = time.perf_counter() - started
            assert store.exact, "the store is larger than EXACT_LIMIT"
            started = time.perf_counter()
            searched = [[i for i, _ in store.query(vectors[r], K)] for r in rows]
            exact_ms = (time.perf_counter() - started) / len(rows) * 1000
        finally:
            store.close()

    def report(label: str, found: list[list[str]], ms: float) -> list[str]:
        share = sum(len(set(f) & e) for f, e in zip(found, exact, strict=True)) / (K * len(rows))
        lost = sum(ids[i] not in f for i, f in zip(rows, found, strict=True))
        return [label, f"{share:.4f}", str(lost), f"{ms:.2f}"]

    print(f"{len(ids)} records, {len(rows)} queries (each a stored vector), k {K}")
    columns = ["search", f"the exact {K} found", "own vector not returned", "ms per query"]
    table = [
        report("Chroma's HNSW graph (`ef_search` 400)", graph, graph_ms),
        report("vaultd's exact search", searched, exact_ms),
    ]
    print(markdown(columns, table))
    record(args.record, columns, table)
    size = vectors.nbytes / 2**20
    print(f"copy of the vectors: made in {copy_s:.2f} s on the first search, {size:.1f} MB")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
