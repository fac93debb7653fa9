"""Search latency through the socket server of two versions of vaultd, in one run, alternately.

Each version (a source tree: this checkout, and another commit checked out elsewhere with
`git worktree add`) serves the same index of a copy of obsidian-hub through its own socket
server (`Api` over `DaemonService`, no indexing worker, so nothing else takes the CPU), and
one client sends the same hybrid searches over the Unix socket, one connection per request,
with a client of its own (the standard library's), the same for both. The versions take turns,
round after round, their order swapped each round, so a busy machine weighs on both alike: the
ratio of the two is the figure that carries over.

The index is made once in `--workdir` with this checkout's `vaultd index`, stopped once its
keyword phase is done (every note searchable by its words; the embedding phase would take both
cores for most of an hour). Searches are hybrid all the same: the query is embedded and the
vector side asked.

    python -m bench.speed.socket_before_after --base /tmp/base37 --workdir /tmp/vaultd-hub-37
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import CORPORA, REPO
from bench.lib.results import add_record_option, record
from bench.lib.stats import percentiles
from bench.lib.workdir import vault_copy


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=60)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def search(sock: str, query: str) -> float:
    body = json.dumps({"query": query, "k": 10, "mode": "hybrid"}).encode()
    started = time.perf_counter()
    connection = _UnixHTTP(sock)
    try:
        connection.request("POST", "/v1/search", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    elapsed = time.perf_counter() - started
    assert response.status == 200, data[:300]
    return elapsed


def serve(tree: Path, config_path: Path, queries: list[str], warm: int) -> list[float]:
    """In a child process whose `vaultd` is `tree`'s: serve the index, search it, stop."""
    sys.path.insert(0, str(tree))
    # Api is defined in vaultd.api.routes now, in vaultd.api.server in older trees; server
    # has it either way.
    from vaultd.api.server import Api, SocketServer
    from vaultd.config import load_config
    from vaultd.daemon.serving import DaemonService
    from vaultd.daemon.state import State
    from vaultd.index.open import open_index

    assert Path(sys.modules["vaultd"].__file__ or "").is_relative_to(tree)
    config = load_config(config_path, env={})
    runtime = Path(tempfile.mkdtemp(prefix="vb-", dir="/tmp"))
    with open_index(config, env={}) as index:
        # Only searched: no worker, and a status that is never asked for.
        service = DaemonService(index, State(), lambda: None, dict)  # type: ignore[arg-type]
        server = SocketServer(runtime / "s.sock", Api(service), index.vault)
        if hasattr(server, "start"):  # uvicorn's, on a thread of its own (issue 57)
            server.start()
        else:  # the standard library's, in older trees
            serve = server.serve_forever  # type: ignore[attr-defined]
            threading.Thread(target=serve, daemon=True).start()
        try:
            sock = str(runtime / "s.sock")
            for query in queries[:warm]:
                search(sock, query)
            return [search(sock, query) for query in queries]
        finally:
            server.close()
            shutil.rmtree(runtime, ignore_errors=True)


def build_index(vault_source: Path, work: Path) -> Path:
    """A copy of the vault indexed by its words (the keyword phase), and its config."""
    vault = vault_copy(vault_source, work)
    from harness.daemon import write_config

    config = write_config(work / "vaultd.toml", vault, work / "data", work / "unused.sock")
    process = subprocess.Popen(
        [sys.executable, "-m", "vaultd", "index", "--json", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert process.stderr is not None
    for line in process.stderr:
        if '"phase": "embed"' in line:
            process.send_signal(signal.SIGINT)  # keeps everything finished
            break
    process.wait(timeout=600)
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other version's tree")
    parser.add_argument("--vault", type=Path, default=CORPORA / "obsidian-hub")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vaultd-hub-37"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    add_record_option(parser)
    args = parser.parse_args()
    config = args.workdir / "vaultd.toml"
    names = sorted(p.stem for p in args.vault.rglob("*.md"))
    picked = random.Random(42).sample(names, min(args.queries, len(names)))
    queries = [" ".join(n.replace("-", " ").split()[:4]) or n for n in picked]
    if args.serve is not None:
        print(json.dumps(serve(args.serve, config, queries, warm=20)))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    if not (args.workdir / "data").exists():
        started = time.perf_counter()
        build_index(args.vault, args.workdir)
        print(f"keyword phase: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    trees = {"before": args.base.resolve(), "after": REPO}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    load: list[float] = []
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            load.append(os.getloadavg()[0])
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.speed.socket_before_after",
                    *sys.argv[1:],
                    "--serve",
                    str(trees[name]),
                ],
                capture_output=True,
                text=True,
                check=True,
                env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            )
            samples[name] += json.loads(done.stdout.strip().splitlines()[-1])
    result: dict[str, Any] = {name: percentiles(s) for name, s in samples.items()}
    result["after_over_before_p50"] = round(
        result["after"]["p50_ms"] / result["before"]["p50_ms"], 3
    )
    result["after_over_before_p99"] = round(
        result["after"]["p99_ms"] / result["before"]["p99_ms"], 3
    )
    result["load_average_1min"] = [round(x, 2) for x in load]
    print(json.dumps(result, indent=2))
    before, after = result["before"], result["after"]
    row = [f"{args.rounds} rounds ({len(samples['after']):,} searches each)"]
    row += [f"{p[key]:.1f} ms" for p in (before, after) for key in ("p50_ms", "p99_ms")]
    row += [f"{result['after_over_before_p50']:.2f}", f"{result['after_over_before_p99']:.2f}"]
    columns = ["run", "before p50", "before p99", "after p50", "after p99"]
    record(args.record, [*columns, "after / before p50", "p99"], [row])


if __name__ == "__main__":
    main()
