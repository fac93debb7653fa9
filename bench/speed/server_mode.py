"""Embedded Chroma against a Chroma server (`chroma run` on loopback): indexing and query speed.

Indexes a copy of the vault twice from scratch, once per mode (both embed every chunk, so the
difference is the store), then times what only the store does:

- restore: every record written again from vaultd's manifest into an empty collection, as
  `sync_store` does after a lost server (no embedding: the vectors come from the manifest);
- raw vector queries (`VectorStore.query`, k=10, pre-computed query vectors);
- full searches (`Searcher.search`, embedding the query included), vector and hybrid.

    python -m bench.speed.server_mode --corpus ../shared/corpora/obsidian-help/en --queries 200

With `--reuse-vectors`, a second run in the same workdir skips the model in both modes: the
manifest's vectors are kept and everything else a first index does (parsing, chunking, the
store's and the manifest's writes) is timed, which is where the two modes differ.

The server runs on the same machine, so the figures show the cost of the HTTP API and the
separate process, not of a network; add your network's round trip per request on top.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from bench.lib.machine import cpu_model
from bench.lib.paths import SHARED
from bench.lib.results import add_record_option, record
from bench.lib.stats import percentiles
from bench.lib.tables import markdown
from bench.lib.workdir import vault_copy
from vaultd.config import load_config
from vaultd.index.export import export_records
from vaultd.index.open import open_index
from vaultd.layout import MANIFEST as FILE_NAME
from vaultd.query import SearchQuery
from vaultd.storage import schema

SHARED = SHARED


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def chroma_server(path: Path, log: Path) -> Iterator[str]:
    """`chroma run` on a free loopback port, until its heartbeat answers; yields its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    chroma = Path(sys.executable).parent / "chroma"
    command = [str(chroma), "run", "--path", str(path), "--port", str(port), "--host", "127.0.0.1"]
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"chroma run did not start; see {log}") from None
                time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def write_config(path: Path, vault: Path, data: Path, url: str = "", collection: str = "") -> Path:
    store = f'path = "{data}"\n'
    if url:
        store += f'url = "{url}"\ncollection = "{collection}"\n'
    path.write_text(
        f'[vault]\npath = "{vault}"\n\n[store]\n{store}\n[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    return path


def queries_from(vault: Path, count: int, seed: int = 7) -> list[str]:
    """Note titles as a user would half-remember them, repeated to `count`."""
    names = sorted(p.stem for p in vault.rglob("*.md"))
    rng = random.Random(seed)
    return [" ".join(rng.choice(names).replace("-", " ").split()[:4]) for _ in range(count)]


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(config_file: Path, queries: list[str]) -> dict[str, Any]:
    """Index from scratch, then time queries; returns the figures and the export's ids."""
    config = load_config(config_file)
    out: dict[str, Any] = {}
    with open_index(config) as index:
        started = time.perf_counter()
        summary = index.indexer.reconcile()
        out["index_s"] = round(time.perf_counter() - started, 2)
        out["chunks"] = index.store.count()
        out["chunks_embedded"] = summary.chunks_embedded
        vectors = [index.embedder.embed_query(q) for q in queries]
        index.store.query(vectors[0], 10)  # warm the HNSW index and the connection
        # The three kinds take turns on each query, so a change in the machine's load hits all.
        samples: dict[str, list[float]] = {"store_query": [], "vector": [], "hybrid": []}
        for query, vector in zip(queries, vectors, strict=True):
            samples["store_query"].append(timed(partial(index.store.query, vector, 10)))
            for mode in ("vector", "hybrid"):
                search = partial(index.searcher.search, SearchQuery(query, k=10, mode=mode))
                samples[mode].append(timed(search))
        out["store_query"] = percentiles(samples["store_query"], 0.95)
        out["search_vector"] = percentiles(samples["vector"], 0.95)
        out["search_hybrid"] = percentiles(samples["hybrid"], 0.95)
        out["export"] = [r["id"] for r in export_records(index.store)]
    return out


def measure_restore(config_file: Path) -> dict[str, Any]:
    """Write every record again from the manifest into an empty collection (no embedding)."""
    with open_index(load_config(config_file)) as index:
        started = time.perf_counter()
        repaired = index.indexer.sync_store()
        seconds = time.perf_counter() - started
    return {
        "records": repaired,
        "seconds": round(seconds, 2),
        "records_per_s": round(repaired / seconds),
    }


def copy_manifest(source: Path, target: Path) -> None:
    """vaultd's own database (with its WAL, if any) into a new data directory: an empty store."""
    target.mkdir()
    for file in source.glob(FILE_NAME + "*"):
        shutil.copy(file, target / file.name)


def vectors_only(source: Path, target: Path) -> None:
    """A data directory whose manifest knows every vector of `source` but no note: indexing
    into it does all the work of a first index except running the model."""
    copy_manifest(source, target)
    with sqlite3.connect(target / FILE_NAME) as db:
        schema.register(db)  # the keyword index's triggers call vaultd's own functions
        for table in ("chunks", "note_tags", "note_links", "notes", "in_flight", "suspects"):
            db.execute(f"DELETE FROM {table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=SHARED / "corpora/obsidian-help/en")
    parser.add_argument("--workdir", type=Path, help="Kept after the run; default a temp dir.")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON only.")
    parser.add_argument(
        "--reuse-vectors",
        action="store_true",
        help="Do not run the model: index both modes from the vectors a previous run left in "
        "WORKDIR/embedded (every other step of a first index is timed as usual).",
    )
    add_record_option(parser)
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="vaultd-server-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    vault = vault_copy(args.corpus, work)
    queries = queries_from(vault, args.queries)
    results: dict[str, Any] = {
        "corpus": str(args.corpus),
        "notes": sum(1 for _ in vault.rglob("*.md")),
        "queries": len(queries),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
    }

    names = ["embedded-restore", "server-data", "server-restore", "chroma-server"]
    if args.reuse_vectors:
        if not (work / "embedded" / FILE_NAME).exists():
            parser.error(f"--reuse-vectors needs a previous run's {work / 'embedded'}")
        names += ["embedded-cached"]
    else:
        names += ["embedded"]
    for name in names:
        shutil.rmtree(work / name, ignore_errors=True)
    results["model_run"] = not args.reuse_vectors
    if args.reuse_vectors:
        vectors_only(work / "embedded", work / "embedded-cached")
        vectors_only(work / "embedded", work / "server-data")
        embedded = write_config(work / "embedded-cached.toml", vault, work / "embedded-cached")
    else:
        embedded = write_config(work / "embedded.toml", vault, work / "embedded")
    results["embedded"] = measure(embedded, queries)
    # The restore: the same manifest, an empty store.
    copy_manifest(work / "embedded", work / "embedded-restore")
    restore = write_config(work / "embedded-restore.toml", vault, work / "embedded-restore")
    results["embedded"]["restore"] = measure_restore(restore)

    with chroma_server(work / "chroma-server", work / "chroma.log") as url:
        server = write_config(work / "server.toml", vault, work / "server-data", url, "bench")
        results["server"] = measure(server, queries)
        copy_manifest(work / "embedded", work / "server-restore")
        restore = write_config(
            work / "server-restore.toml", vault, work / "server-restore", url, "bench-restore"
        )
        results["server"]["restore"] = measure_restore(restore)

    same = results["embedded"].pop("export") == results["server"].pop("export")
    results["same_ids"] = same
    print(json.dumps(results, indent=2))
    columns, rows = ["", "embedded", "server (loopback)"], table(results)
    if not args.json:
        print()
        print(markdown(columns, rows))
    record(args.record, columns, rows)


def table(results: dict[str, Any]) -> list[list[str]]:
    e, s = results["embedded"], results["server"]
    how = "embedding included" if results["model_run"] else "vectors reused, no model"
    rows = [
        [f"first index ({e['chunks']} chunks, {how})", f"{e['index_s']} s", f"{s['index_s']} s"],
        ["restore from the manifest (store writes only)"]
        + [f"{m['restore']['seconds']} s ({m['restore']['records_per_s']}/s)" for m in (e, s)],
    ]
    for key, label in (
        ("store_query", "vector query, store only (k=10)"),
        ("search_vector", "`search --mode vector` (query embedded)"),
        ("search_hybrid", "`search` hybrid"),
    ):
        rows.append(
            [f"{label}, p50 / p95"]
            + [f"{m[key]['p50_ms']} / {m[key]['p95_ms']} ms" for m in (e, s)]
        )
    return rows


if __name__ == "__main__":
    main()
