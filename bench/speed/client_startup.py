"""How fast the light clients start: `vaultd status`, `vaultd search` through a running daemon,
`vaultd mcp` (launch to its answer to `tools/list`) and `vaultd --help`, and which of
onnxruntime, chromadb, tokenizers and numpy they load (`python -X importtime`).

Starts one daemon on a copy of examples/vault, then runs each client `--runs` times.

    python -m bench.speed.client_startup --runs 15
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from bench.lib.paths import REPO
from bench.lib.results import add_record_option, record
from harness.daemon import short_socket_dir, start, write_config

ROOT = REPO

HEAVY = ("onnxruntime", "chromadb", "tokenizers", "numpy")


def tree_of(env: dict[str, str] | None) -> str | None:
    """The source tree a client runs from: `python -m` puts its working directory first on
    sys.path, ahead of PYTHONPATH, so it runs there."""
    return (env or {}).get("PYTHONPATH")


def mcp_session(command: list[str], env: dict[str, str] | None = None) -> tuple[float, bytes]:
    """Seconds from launching `vaultd mcp` to its answer to `tools/list`, and its stderr."""
    # Its stderr to a file, not a pipe: `-X importtime`'s report fills a pipe read only at the
    # end, and the client then blocks writing it before it answers.
    with tempfile.TemporaryFile() as err:
        took = _to_tools_list(command, env, err)
        err.seek(0)
        return took, err.read()


def _to_tools_list(command: list[str], env: dict[str, str] | None, err: IO[bytes]) -> float:
    began = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        env={**os.environ, **(env or {})},
        cwd=tree_of(env),
    )
    assert process.stdin is not None and process.stdout is not None
    messages: list[dict[str, Any]] = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    try:
        process.stdin.write(json.dumps(messages[0]).encode() + b"\n")
        process.stdin.flush()
        for line in process.stdout:
            answer = json.loads(line)
            if answer.get("id") == 1:
                for message in messages[1:]:
                    process.stdin.write(json.dumps(message).encode() + b"\n")
                process.stdin.flush()
            elif answer.get("id") == 2:
                assert answer["result"]["tools"], answer
                took = time.perf_counter() - began
                break
        else:
            raise RuntimeError("vaultd mcp closed its output before answering tools/list")
    finally:
        process.stdin.close()
    process.wait(30)
    return took


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    began = time.perf_counter()
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        env={**os.environ, **(env or {})},
        cwd=tree_of(env),
    )
    return time.perf_counter() - began


def heavy_in(stderr: bytes) -> list[str]:
    """Which of HEAVY were imported, from `-X importtime`'s lines."""
    names = {line.rsplit(b"|", 1)[-1].strip().decode() for line in stderr.splitlines()}
    return [h for h in HEAVY if h in names]


def heavy_imports(command: list[str], env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        command,
        capture_output=True,
        check=True,
        env={**os.environ, **env, **IMPORTTIME},
        cwd=tree_of(env),
    )
    return heavy_in(done.stderr)


IMPORTTIME = {"PYTHONPROFILEIMPORTTIME": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--tree",
        action="append",
        type=Path,
        help="a source tree to run the clients from (first on PYTHONPATH; repeatable; "
        "default this checkout); trees take turns within each run",
    )
    add_record_option(parser)
    args = parser.parse_args()
    trees: list[Path] = [t.resolve() for t in args.tree or [ROOT]]
    work = Path(tempfile.mkdtemp(prefix="vaultd-startup-"))
    sockets = short_socket_dir()
    try:
        vault = work / "vault"
        shutil.copytree(ROOT / "examples" / "vault", vault)
        socket = sockets / "vaultd.sock"
        config = write_config(work / "vaultd.toml", vault, work / "data", socket)
        daemon = start(config, socket, work / "vaultd.log")
        try:
            daemon.wait_idle()
            base = [sys.executable, "-m", "vaultd"]
            status = [*base, "status", "--json", "--config", str(config)]
            search = [*base, "search", "garden", "--json", "--config", str(config)]
            mcp = [*base, "mcp", "--config", str(config)]
            help_ = [*base, "--help"]
            clients: dict[str, Callable[[dict[str, str]], float]] = {
                "vaultd status": lambda env: timed(status, env),
                "vaultd search": lambda env: timed(search, env),
                "vaultd mcp (to tools/list)": lambda env: mcp_session(mcp, env)[0],
                "vaultd --help": lambda env: timed(help_, env),
            }
            samples: dict[tuple[str, Path], list[float]] = {}
            for _ in range(args.runs):
                for name, client in clients.items():
                    for tree in trees:
                        took = client({"PYTHONPATH": str(tree)})
                        samples.setdefault((name, tree), []).append(took)
            heavy: dict[tuple[str, Path], list[str]] = {}
            for tree in trees:
                env = {"PYTHONPATH": str(tree)}
                heavy[("vaultd status", tree)] = heavy_imports(status, env)
                heavy[("vaultd search", tree)] = heavy_imports(search, env)
                heavy[("vaultd --help", tree)] = heavy_imports(help_, env)
                stderr = mcp_session(mcp, {**env, **IMPORTTIME})[1]
                heavy[("vaultd mcp (to tools/list)", tree)] = heavy_in(stderr)
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)
    print(f"{'client':<28} {'tree':<24} {'median s':>9} {'min s':>7} {'ratio':>6}  imports")
    rows: list[list[str]] = []
    for name in clients:
        first = statistics.median(samples[(name, trees[0])])
        for tree in trees:
            runs = samples[(name, tree)]
            imports = ", ".join(heavy[(name, tree)]) or "-"
            print(
                f"{name:<28} {tree.name:<24} {statistics.median(runs):>9.3f} {min(runs):>7.3f} "
                f"{statistics.median(runs) / first:>6.2f}  {imports}"
            )
            median = statistics.median(runs)
            rows.append(
                [
                    f"`{name}`",
                    tree.name,
                    f"{median:.3f}",
                    f"{min(runs):.3f}",
                    f"{median / first:.2f}",
                    imports,
                ]
            )
    columns = ["client", "tree", "median s", "min s", "ratio", "imports"]
    record(args.record, columns, rows, align=["none", "none", "right", "right", "right", "none"])


if __name__ == "__main__":
    main()
