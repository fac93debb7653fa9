"""Search latency through the daemon's Unix socket with 1, 4 and 16 concurrent clients,
beside the same searches called in-process (the socket's overhead as a ratio).

Indexes the vault first if needed (default ../shared/corpora/obsidian-hub; the first index of
it takes a while, later runs reuse `--workdir`).

    python -m bench.speed.socket_latency --workdir /tmp/vaultd-hub --queries 200
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import CORPORA, SHARED
from bench.lib.results import add_record_option, record
from bench.lib.stats import percentiles
from bench.lib.workdir import vault_copy
from harness.daemon import short_socket_dir, start, write_config
from vaultd.api.client import Client
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.query import SearchQuery

SHARED = SHARED


def queries_from(vault: Path, count: int, seed: int) -> list[str]:
    """Note titles and phrases of the vault, as a user would half-remember them."""
    names = sorted(p.stem for p in vault.rglob("*.md"))
    rng = random.Random(seed)
    picked = rng.sample(names, min(count, len(names)))
    return [" ".join(name.replace("-", " ").split()[:4]) or name for name in picked]


def through_socket(client: Client, queries: list[str], clients: int, mode: str) -> list[float]:
    samples: list[float] = []
    lock = threading.Lock()
    work = list(queries)

    def worker() -> None:
        while True:
            with lock:
                if not work:
                    return
                query = work.pop()
            started = time.perf_counter()
            client.request("POST", "/v1/search", {"query": query, "k": 10, "mode": mode})
            elapsed = time.perf_counter() - started
            with lock:
                samples.append(elapsed)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, default=CORPORA / "obsidian-hub")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vaultd-hub"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--json", action="store_true")
    add_record_option(parser)
    args = parser.parse_args()

    work = args.workdir
    vault = vault_copy(args.vault, work)
    socket = short_socket_dir() / "vaultd.sock"
    config_path = write_config(work / "vaultd.toml", vault, work / "data", socket)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "vaultd", "index", "--json", "-q", "--config", str(config_path)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    result: dict[str, Any] = {"index_seconds": round(time.perf_counter() - started, 1)}
    queries = queries_from(vault, args.queries, seed=42)

    config = load_config(config_path, env={})
    with open_index(config, env={}) as index:
        result["notes"] = index.manifest.counts()["notes"]
        result["chunks"] = index.manifest.counts()["chunks"]
        for query in queries[:10]:  # warm up caches as the daemon's would be
            index.searcher.search(SearchQuery(query, k=10, mode=args.mode))
        samples = []
        for query in queries:
            t0 = time.perf_counter()
            index.searcher.search(SearchQuery(query, k=10, mode=args.mode))
            samples.append(time.perf_counter() - t0)
        result["in_process"] = percentiles(samples, digits=1)

    daemon = start(config_path, socket, work / "vaultd.log")
    try:
        client = Client(socket)
        through_socket(client, queries[:10], 1, args.mode)
        for clients in (1, 4, 16):
            result[f"socket_{clients}_clients"] = percentiles(
                through_socket(client, queries, clients, args.mode), digits=1
            )
    finally:
        daemon.stop()
    result["socket_overhead_ratio_p50"] = round(
        result["socket_1_clients"]["p50_ms"] / result["in_process"]["p50_ms"], 2
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    rows = [["in-process", result["in_process"]]]
    rows += [
        [f"socket, {n} client{'s' * (n > 1)}", result[f"socket_{n}_clients"]] for n in (1, 4, 16)
    ]
    ms = [[name, f"{p['p50_ms']:.1f} ms", f"{p['p99_ms']:.1f} ms"] for name, p in rows]
    record(args.record, ["", "p50", "p99"], ms)


if __name__ == "__main__":
    main()
