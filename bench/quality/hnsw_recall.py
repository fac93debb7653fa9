"""How near to exact Chroma's HNSW search is, at several search breadths (`ef_search`).

On the index `scifact_eval.py --workdir DIR` built: every judged query is embedded as search
embeds it, and for each breadth a copy of the store is searched for the 100 nearest passages
and compared with the exact 100 nearest (every stored vector scored). Reports the share of the
exact 100 found, vector-only nDCG@10 (a document ranked by its best passage), and the mean time
of one Chroma query. Usage:

    python -m bench.quality.hnsw_recall --workdir /tmp/sf [--ef 100,200,400,800]

Each breadth runs in a process of its own on a fresh copy: a collection's breadth is read
when its index is first loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from bench.lib.beir import dedupe, load_dataset, ndcg_at
from bench.lib.paths import SHARED
from bench.lib.results import add_record_option, record
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.layout import CHROMA, MANIFEST

DEFAULT_DATA = SHARED / "bench" / "scifact"
K = 100


def measure(chroma: Path, ef: int, queries: np.ndarray) -> dict[str, Any]:
    """In a child process: set the breadth, then search; the exact ranking from the vectors."""
    import chromadb

    client = chromadb.PersistentClient(path=str(chroma))
    collection = client.get_collection(client.list_collections()[0].name)
    collection.modify(configuration={"hnsw": {"ef_search": ef}})
    collection.query(query_embeddings=[queries[0]], n_results=K, include=[])  # load the index
    started = time.perf_counter()
    found = [
        collection.query(query_embeddings=[q], n_results=K, include=[])["ids"][0] for q in queries
    ]
    per_query = (time.perf_counter() - started) / len(queries) * 1000
    stored = collection.get(include=["embeddings"])
    ids, vectors = np.array(stored["ids"]), np.asarray(stored["embeddings"])
    exact = [ids[np.argsort(-(vectors @ q))[:K]].tolist() for q in queries]
    return {"ef": ef, "found": found, "exact": exact, "ms_per_query": per_query}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workdir", type=Path, required=True, help="scifact_eval.py's")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--ef", default="100,200,400,800", help="comma-separated breadths")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    add_record_option(parser)
    args = parser.parse_args(argv)
    if args.child:
        chroma, ef, saved = args.child
        result = measure(Path(chroma), int(ef), np.load(saved))
        Path(saved).with_suffix(".json").write_text(json.dumps(result))
        return 0
    dataset = load_dataset(args.data)
    queries = dataset.judged_queries()
    config = load_config(args.workdir / "vaultd.toml", env=os.environ)
    with open_index(config) as index:
        vectors = np.array([index.searcher.embedder.embed_query(t) for _, t in queries])
    data = config.store.path
    assert data is not None
    db = sqlite3.connect(data / MANIFEST)
    path_of = dict(db.execute("SELECT id, path FROM chunks"))
    db.close()
    print("ef_search | exact 100 found | vector nDCG@10 | exact nDCG@10 | ms per query")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="vaultd-hnsw-") as scratch:
        saved = Path(scratch) / "queries.npy"
        np.save(saved, vectors.astype(np.float32))
        for ef in (int(e) for e in args.ef.split(",")):
            copy = Path(scratch) / f"chroma-{ef}"
            shutil.copytree(data / CHROMA, copy)
            child = [
                sys.executable,
                "-m",
                "bench.quality.hnsw_recall",
                "--workdir",
                str(args.workdir),
            ]
            subprocess.run([*child, "--child", str(copy), str(ef), str(saved)], check=True)
            result = json.loads(saved.with_suffix(".json").read_text())
            shutil.rmtree(copy)

            def ndcg(rankings: list[list[str]]) -> float:
                scores = [
                    ndcg_at(
                        dedupe(PurePosixPath(path_of[c]).stem for c in ranking),
                        dataset.qrels[qid],
                        10,
                    )
                    for ranking, (qid, _) in zip(rankings, queries, strict=True)
                ]
                return sum(scores) / len(scores)

            pairs = zip(result["found"], result["exact"], strict=True)
            share = sum(len(set(f) & set(e)) for f, e in pairs) / (K * len(queries))
            print(
                f"{ef:9} | {share:15.4f} | {ndcg(result['found']):14.4f} | "
                f"{ndcg(result['exact']):13.4f} | {result['ms_per_query']:.2f}"
            )
            figures = (share, ndcg(result["found"]), ndcg(result["exact"]))
            rows.append([str(ef), *(f"{x:.4f}" for x in figures), f"{result['ms_per_query']:.2f}"])
    columns = ["ef_search", f"the exact {K} found", "vector nDCG@10", "exact nDCG@10"]
    record(args.record, [*columns, "ms per query"], rows, align=["right"] * 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
