"""The socket's transport of two versions of vaultd, in one run: search latency, the daemon under
held load, and hostile clients.

Each version (a source tree: this checkout, and another commit checked out elsewhere with
`git worktree add`) runs as `vaultd run` over an index of obsidian-hub: a copy of the vault
(writable, so a note can be held back), and a data directory of its own per version, both
copied once from `--index` (a directory holding `vault/` and `data/`; the copy's manifest is
pointed at the vault copy). Each round starts both daemons side by side and, once both are idle:

1. search: hybrid searches through the socket, one connection each (as the CLI asks), the same
   query to each daemon in turn, which goes first alternating, so a busy machine weighs on
   both alike;

then, one daemon after the other (their order swapped each round):

2. held load: 500 idle connections, 200 long-polls (searches waiting for a note the daemon
   holds back with a 10-minute debounce) and 32 event streams, all opened, then the daemon's
   threads and RSS (from /proc) and health asked on a fresh connection every 50 ms;
3. hostile clients, at once, with health asked every 100 ms all along: 100 connections each
   sending a request line a byte a second, a client asking for the export with a 4 KiB receive
   buffer and never reading, and a request line of 1 MiB; when each was cut or refused.

    python -m bench.speed.socket_transport --base /tmp/base-57 --index /tmp/k53-hub
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.paths import REPO
from bench.lib.results import add_record_option, record
from bench.lib.stats import percentiles

IDLE, POLLS, STREAMS, SLOW = 500, 200, 32, 100
#: How long the held load is probed (within the daemons' 10 s idle timeout, so the idle
#: connections they keep stay open), and the hostile clients are watched at most.
HOLD, HOSTILE = 6.0, 30.0


@dataclass
class Answer:
    status: int
    seconds: float


def ask(sock: str, method: str, target: str, body: Any = None, timeout: float = 60) -> Answer:
    """One request on a fresh connection, read to its end."""
    data = b"" if body is None else json.dumps(body).encode()
    request = (
        f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data
    started = time.perf_counter()
    received = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(sock)
            conn.sendall(request)
            while chunk := conn.recv(65536):
                received += chunk
        except OSError:
            pass
    seconds = time.perf_counter() - started
    status = int(received.split()[1]) if received.startswith(b"HTTP/1.") else 0
    return Answer(status, seconds)


def opened(sock: str, request: bytes = b"", rcvbuf: int | None = None) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if rcvbuf is not None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        conn.connect(sock)
        if request:
            conn.sendall(request)
    except OSError:
        conn.close()
        return None
    return conn


def hung_up(conn: socket.socket) -> bool:
    """Whether the daemon closed `conn` (read or not: POLLHUP is set with data still unread)."""
    poller = select.poll()
    poller.register(conn, select.POLLHUP | select.POLLERR)
    return any(event & (select.POLLHUP | select.POLLERR) for _, event in poller.poll(0))


def proc(pid: int) -> tuple[int, float]:
    """The process's threads and resident memory (MB)."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def probe(sock: str, every: float, until: float, into: list[Answer]) -> None:
    while time.monotonic() < until:
        into.append(ask(sock, "GET", "/v1/health", timeout=30))
        time.sleep(every)


@dataclass
class Daemon:
    name: str
    tree: Path
    config: Path
    sock: str
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(self.tree), "VAULTD_CONFIG": ""}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vaultd", "run", "--config", str(self.config)],
                cwd=self.tree,
                env=env,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 600
        while ask(self.sock, "GET", "/v1/health", timeout=5).status != 200:
            assert self.process.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.2)
        body = {"query": "x", "k": 1, "mode": "keyword", "wait_for": "idle", "timeout": 60}
        while ask(self.sock, "POST", "/v1/search", body, timeout=90).status != 200:
            assert time.monotonic() < deadline, "the daemon did not become idle"

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(120)


@dataclass
class Held:
    kept_idle: int
    threads: int
    rss_mb: float
    health: list[Answer] = field(default_factory=list)


def held(daemon: Daemon, pending: str) -> Held:
    """The daemon's threads, RSS and health with the load of the module's step 2 open."""
    assert daemon.process is not None
    body = json.dumps({"query": "pending", "k": 1, "wait_for": pending, "timeout": 60}).encode()
    poll = (
        b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    stream = b"GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n"
    conns = [opened(daemon.sock) for _ in range(IDLE)]
    conns += [opened(daemon.sock, poll) for _ in range(POLLS)]
    conns += [opened(daemon.sock, stream) for _ in range(STREAMS)]
    try:
        # The last connections' requests in hand (a thread each, before).
        time.sleep(2)
        threads, rss = proc(daemon.process.pid)
        kept = sum(1 for c in conns[:IDLE] if c is not None and not hung_up(c))
        answers: list[Answer] = []
        probe(daemon.sock, 0.05, time.monotonic() + HOLD, answers)
        again = proc(daemon.process.pid)
        return Held(kept, max(threads, again[0]), max(rss, again[1]), answers)
    finally:
        for conn in conns:
            if conn is not None:
                conn.close()


def slow_loris(sock: str, cuts: list[float]) -> None:
    """SLOW connections sending a request line a byte a second; each one's time to its cut."""
    started = time.monotonic()
    conns = {
        c: started for _ in range(SLOW) if (c := opened(sock, b"GET /v1/health?q=")) is not None
    }
    while conns and time.monotonic() - started < HOSTILE:
        for conn in list(conns):
            try:
                if hung_up(conn):
                    raise BrokenPipeError
                conn.send(b"a")
            except OSError:
                cuts.append(time.monotonic() - conns.pop(conn))
                conn.close()
        time.sleep(1)
    cuts.extend(float("inf") for _ in conns)
    for conn in conns:
        conn.close()


def never_reads(sock: str, out: dict[str, float]) -> None:
    """The export asked with a 4 KiB receive buffer and never read: when the daemon cut it."""
    conn = opened(sock, b"GET /v1/export HTTP/1.1\r\nHost: x\r\n\r\n", rcvbuf=4096)
    assert conn is not None
    started = time.monotonic()
    with conn:
        while not hung_up(conn) and time.monotonic() - started < HOSTILE:
            time.sleep(0.1)
        out["never_reads_s"] = time.monotonic() - started if hung_up(conn) else float("inf")


def long_line(sock: str, out: dict[str, float]) -> None:
    """A request line of 1 MiB: the answer's status, and when it came."""
    started = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(HOSTILE)
        conn.connect(sock)
        with contextlib.suppress(OSError):  # refused before the rest was read
            conn.sendall(b"GET /" + b"a" * (1 << 20) + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        try:
            while chunk := conn.recv(65536):
                received += chunk
        except OSError:
            pass
    out["long_line_s"] = time.monotonic() - started
    out["long_line_status"] = int(received.split()[1]) if received.startswith(b"HTTP/") else 0


def hostile(daemon: Daemon) -> dict[str, Any]:
    cuts: list[float] = []
    out: dict[str, float] = {}
    clients = [
        threading.Thread(target=slow_loris, args=(daemon.sock, cuts)),
        threading.Thread(target=never_reads, args=(daemon.sock, out)),
        threading.Thread(target=long_line, args=(daemon.sock, out)),
    ]
    for client in clients:
        client.start()
    health: list[Answer] = []
    until = time.monotonic() + HOSTILE
    while any(c.is_alive() for c in clients) and time.monotonic() < until:
        probe(daemon.sock, 0.1, min(until, time.monotonic() + 1), health)
    for client in clients:
        client.join()
    return {"slow_cuts": sorted(cuts), **out, "health": health}


def interleaved(daemons: list[Daemon], queries: list[str], warm: int) -> dict[str, list[float]]:
    """Each query asked of every daemon in turn, the first one alternating."""
    took: dict[str, list[float]] = {d.name: [] for d in daemons}
    for n, query in enumerate(queries[:warm] + queries):
        for daemon in daemons if n % 2 == 0 else daemons[::-1]:
            answer = ask(daemon.sock, "POST", "/v1/search", {"query": query, "k": 10})
            assert answer.status == 200, answer
            if n >= warm:
                took[daemon.name].append(answer.seconds)
    return took


def loaded(daemon: Daemon, vault: Path, turn: int) -> dict[str, Any]:
    """Steps 2 and 3 of the module on one daemon."""
    pending = f"Pending {daemon.name} {turn}.md"
    (vault / pending).write_text("# Pending\n\nHeld back by the debounce.\n", "utf-8")
    try:
        return {"held": held(daemon, pending), "hostile": hostile(daemon)}
    finally:
        (vault / pending).unlink()


def round_(daemons: list[Daemon], vault: Path, queries: list[str], turn: int) -> dict[str, Any]:
    for daemon in daemons:
        daemon.start()
    try:
        took = interleaved(daemons, queries, warm=20)
        order = daemons if turn % 2 == 0 else daemons[::-1]
        return {d.name: {"search": took[d.name], **loaded(d, vault, turn)} for d in order}
    finally:
        for daemon in daemons:
            daemon.stop()


def prepare(index: Path, work: Path, trees: dict[str, Path]) -> tuple[Path, dict[str, Daemon]]:
    """The vault copy, and each version's daemon over its own copy of the index."""
    vault = work / "vault"
    if not vault.exists():
        shutil.copytree(index / "vault", vault)
        for root, _, files in os.walk(vault):
            os.chmod(root, 0o755)
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
    runtime = Path(tempfile.mkdtemp(prefix="vt-", dir="/tmp"))
    daemons = {}
    for name, tree in trees.items():
        data = work / f"data-{name}"
        if not data.exists():
            shutil.copytree(index / "data", data)
            with sqlite3.connect(data / "vaultd.db") as db:
                db.execute("UPDATE meta SET value = ? WHERE key = 'vault'", (str(vault),))
        sock = runtime / f"{name}.sock"
        config = work / f"{name}.toml"
        config.write_text(
            f'[vault]\npath = "{vault}"\n[store]\npath = "{data}"\n'
            f'[server]\nsocket = "{sock}"\n[watch]\ndebounce = "10m"\n'
            '[log]\nlevel = "info"\nformat = "json"\n[embedding]\nyield_above = 1.0\n',
            encoding="utf-8",
        )
        daemons[name] = Daemon(name, tree, config, str(sock), work / f"{name}.log")
    return vault, daemons


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One version's figures over its sessions."""
    held_health = [a for r in runs for a in r["held"].health]
    hostile_health = [a for r in runs for a in r["hostile"]["health"]]
    cuts = [c for r in runs for c in r["hostile"]["slow_cuts"]]
    return {
        "search": percentiles([s for r in runs for s in r["search"]]),
        "kept_idle": max(r["held"].kept_idle for r in runs),
        "threads": max(r["held"].threads for r in runs),
        "rss_mb": max(r["held"].rss_mb for r in runs),
        "held_health": percentiles([a.seconds for a in held_health]),
        "held_answered": f"{sum(a.status == 200 for a in held_health)}/{len(held_health)}",
        "slow_cut_s": {"min": min(cuts), "max": max(cuts), "cut": sum(c < HOSTILE for c in cuts)},
        "never_reads_s": max(r["hostile"]["never_reads_s"] for r in runs),
        "long_line": [
            (r["hostile"]["long_line_status"], r["hostile"]["long_line_s"]) for r in runs
        ],
        "hostile_health": percentiles([a.seconds for a in hostile_health]),
        "hostile_answered": f"{sum(a.status == 200 for a in hostile_health)}/{len(hostile_health)}",
    }


def rows(result: dict[str, dict[str, Any]], searched: int) -> list[list[str]]:
    def each(pick: Any) -> list[str]:
        return [pick(result["before"]), pick(result["after"])]

    def worst_line(r: dict[str, Any]) -> str:
        status, seconds = max(r["long_line"], key=lambda x: x[1])
        return f"{status} after {ms(seconds)}"

    return [
        [f"search p50 ({searched:,} each)", *each(lambda r: f"{r['search']['p50_ms']:.1f} ms")],
        ["search p99", *each(lambda r: f"{r['search']['p99_ms']:.1f} ms")],
        [f"idle connections kept open (of {IDLE})", *each(lambda r: str(r["kept_idle"]))],
        ["daemon threads under held load", *each(lambda r: str(r["threads"]))],
        ["daemon RSS under held load", *each(lambda r: f"{r['rss_mb']:.0f} MB")],
        ["health p50 under held load", *each(lambda r: f"{r['held_health']['p50_ms']:.1f} ms")],
        ["health p99 under held load", *each(lambda r: f"{r['held_health']['p99_ms']:.1f} ms")],
        ["health answered under held load", *each(lambda r: r["held_answered"])],
        [
            f"slow-loris ({SLOW}, 1 byte/s): cut after",
            *each(lambda r: f"{r['slow_cut_s']['min']:.1f}–{r['slow_cut_s']['max']:.1f} s"),
        ],
        ["export never read: cut after", *each(lambda r: f"{r['never_reads_s']:.1f} s")],
        ["1 MiB request line: answered", *each(worst_line)],
        [
            "health p99 among hostile clients",
            *each(lambda r: f"{r['hostile_health']['p99_ms']:.1f} ms"),
        ],
        ["health answered among hostile clients", *each(lambda r: r["hostile_answered"])],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other version's tree")
    parser.add_argument("--index", type=Path, default=Path("/tmp/k53-hub"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vaultd-bench-57"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    add_record_option(parser)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    trees = {"before": args.base.resolve(), "after": REPO}
    vault, daemons = prepare(args.index, args.workdir, trees)
    names = sorted(p.stem for p in vault.rglob("*.md"))
    picked = random.Random(42).sample(names, min(args.queries, len(names)))
    queries = [" ".join(n.replace("-", " ").split()[:4]) or n for n in picked]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    load: list[float] = []
    for turn in range(args.rounds):
        load.append(os.getloadavg()[0])
        for name, run in round_(list(daemons.values()), vault, queries, turn).items():
            runs[name].append(run)
        print(f"round {turn + 1} done", file=sys.stderr)
    result = {name: summary(found) for name, found in runs.items()}
    print(json.dumps({**result, "load_average_1min": load}, indent=2, default=str))
    searched = len(queries) * args.rounds
    notes = (
        f"{args.rounds} rounds; each daemon `vaultd run` over its own copy of the index, both "
        "running and idle, each search asked of both in turn (the first alternating), the held "
        "load and the hostile clients one daemon at a time (the order swapped each round); "
        "1-minute load averages at each round's start: " + ", ".join(f"{x:.2f}" for x in load)
    )
    record(args.record, ["measure", "before", "after"], rows(result, searched), notes=notes)


if __name__ == "__main__":
    main()
