"""Soak: the daemon under a random mix of edits, renames, deletes, queries, kill -9 and restarts.

One vault and one data directory live for the whole run, as on a user's machine. Each round
starts `vaultd run`, applies a burst of random file operations while a client thread queries
the socket, then ends the daemon one of four ways: SIGKILL at a random moment (often in the
middle of indexing), SIGTERM, a SIGHUP reload followed by SIGTERM, or SIGSTOP (edits made
while it is frozen, then SIGCONT and SIGTERM, or SIGKILL while still frozen). After every
restart the daemon is left to settle, stopped, and its export compared exhaustively (ids,
documents, metadata, vectors within 1e-5) with a fresh index of the vault as it is on disk.

Every round also makes stealthy edits, the kind a size-and-mtime check cannot see: a word
swapped for another of the same length with the old mtime put back (`touch -r`), and two
same-size saves within one second stamped with whole seconds (what a filesystem with 1-second
timestamps records).

    python -m bench.soak.soak --minutes 30 --json
    python -m bench.soak.soak --minutes 12 --corpus ../shared/corpora/obsidian-help/en --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.lib.machine import cpu_model
from bench.lib.results import add_record_option, record, report_rows
from harness.convergence import assert_same, export_of, fresh_export
from harness.daemon import RunningDaemon, short_socket_dir, start, write_config
from harness.vaults import WORDS, random_operations, random_text


class Queries(threading.Thread):
    """Searches the socket in a loop while the daemon is meant to be up."""

    def __init__(self, daemon: RunningDaemon, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.client = daemon.client
        self.rng = rng
        self.stop_event = threading.Event()
        self.ok = 0
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop_event.wait(0.05):
            query = " ".join(self.rng.choices(WORDS, k=2))
            try:
                self.client.request("POST", "/v1/search", {"query": query, "k": 5})
                self.ok += 1
            except Exception as exc:  # every failure while the daemon is up counts
                self.errors.append(f"{type(exc).__name__}: {exc}")


def seed(vault: Path, notes: int) -> None:
    rng = random.Random(7)
    for i in range(notes):
        folder = vault / f"f{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i}.md").write_text(random_text(rng, f"Note {i}") * 2, encoding="utf-8")


_WORD = re.compile(rb"[A-Za-z]{5,}")


def stealth_edit(path: Path, rng: random.Random) -> bool:
    """One word written backwards in place, then the old mtime put back: the size, the mtime
    and the inode are as they were; only the ctime and the content say it changed."""
    try:
        before = path.stat()
        data = path.read_bytes()
    except OSError:
        return False
    words = [m for m in _WORD.finditer(data) if m.group()[::-1] != m.group()]
    if not words:
        return False
    word = rng.choice(words)
    with path.open("r+b") as handle:
        handle.seek(word.start())
        handle.write(word.group()[::-1])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    return True


def coarse_saves(path: Path, rng: random.Random) -> bool:
    """Two same-size saves within one second, each stamped with the whole second, as a
    filesystem with 1-second timestamps (FAT, ext4 with small inodes, many network ones)
    records them."""
    second = time.time_ns() // 1_000_000_000 * 1_000_000_000
    done = False
    for _ in range(2):
        if stealth_edit(path, rng):
            os.utime(path, ns=(second, second))
            done = True
    return done


def stealthy_operations(vault: Path, rng: random.Random, count: int) -> int:
    notes = sorted(p for p in vault.rglob("*.md") if ".trash" not in p.parts)
    made = 0
    for _ in range(min(count, len(notes))):
        target = rng.choice(notes)
        made += stealth_edit(target, rng) if rng.random() < 0.6 else coarse_saves(target, rng)
    return made


def run_round(
    args: argparse.Namespace,
    rng: random.Random,
    round_no: int,
    config: Path,
    socket: Path,
    root: Path,
    vault: Path,
    outside: Path,
    totals: dict[str, Any],
) -> tuple[str, int, str, int]:
    """One round: a daemon under operations and queries, ended one of three ways, then a
    restart and the comparison with a fresh index. Returns (verdict, operations, ending,
    queries)."""
    daemon = start(config, socket, root / "vaultd.log", wait_ready=False)
    queries = Queries(daemon, random.Random(round_no))
    queries.start()
    count = rng.randint(5, args.ops)
    # Folders parked outside the vault get a place of their own per round.
    parked = outside / f"round{round_no}"
    parked.mkdir()
    random_operations(vault, parked, random.Random(args.seed * 100_000 + round_no), count)
    totals["stealthy_edits"] += stealthy_operations(vault, rng, rng.randint(1, 6))
    ending = rng.choices(["kill", "term", "reload", "stop"], weights=[4, 2, 1, 3])[0]
    if ending == "stop":
        # Frozen mid-work: edits pile up unseen by a process that cannot run, then it is
        # thawed and stopped, or killed without ever running again.
        time.sleep(rng.uniform(0.0, 2.0))
        # The client thread stops first: a frozen daemon would hold its request open.
        queries.stop_event.set()
        queries.join()
        daemon.process.send_signal(signal.SIGSTOP)
        totals["sigstops"] += 1
        totals["stealthy_edits"] += stealthy_operations(vault, rng, rng.randint(1, 4))
        random_operations(vault, parked, random.Random(args.seed * 200_000 + round_no), 10)
        time.sleep(rng.uniform(0.0, 2.0))
        if rng.random() < 0.5:
            daemon.stop(signal.SIGKILL)
            totals["kills"] += 1
        else:
            daemon.process.send_signal(signal.SIGCONT)
            daemon.wait_idle(timeout=300)
            if daemon.stop() != 0:
                totals["failures"].append(f"round {round_no}: exit not 0 after SIGCONT, SIGTERM")
            totals["graceful_stops"] += 1
    elif ending == "kill":
        time.sleep(rng.uniform(0.0, 3.0))
        queries.stop_event.set()
        queries.join()
        daemon.stop(signal.SIGKILL)
        totals["kills"] += 1
    else:
        if ending == "reload":
            daemon.process.send_signal(signal.SIGHUP)
            totals["reloads"] += 1
        daemon.wait_idle(timeout=300)
        queries.stop_event.set()
        queries.join()
        code = daemon.stop()
        if code != 0:
            totals["failures"].append(f"round {round_no}: exit {code} after SIGTERM")
        totals["graceful_stops"] += 1
    totals["operations"] += count
    totals["queries"] += queries.ok
    totals["query_errors"] += len(queries.errors)
    totals["failures"] += [f"round {round_no}: query {e}" for e in queries.errors[:3]]

    # The restart: let it settle, stop it, and compare with a fresh index of the disk.
    if rng.random() < 0.5:
        # Stealthy edits while nothing runs: the start-up pass must find them itself.
        totals["stealthy_edits"] += stealthy_operations(vault, rng, rng.randint(1, 4))
    daemon = start(config, socket, root / "vaultd.log")
    daemon.wait_idle(timeout=300)
    if daemon.stop() != 0:
        totals["failures"].append(f"round {round_no}: restart did not stop cleanly")
    totals["checks"] += 1
    reference = root / "reference"
    shutil.rmtree(reference, ignore_errors=True)
    try:
        assert_same(export_of(config), fresh_export(vault, reference))
        verdict = "converged"
    except AssertionError as exc:
        totals["divergences"] += 1
        totals["failures"].append(f"round {round_no}: DIVERGED {exc}")
        verdict = f"DIVERGED: {exc}"
    return verdict, count, ending, queries.ok


def seed_from(vault: Path, corpus: Path) -> int:
    """The corpus's notes copied as bytes, folders kept (never anything else it holds)."""
    copied = 0
    for source in sorted(corpus.rglob("*.md")):
        if any(part.startswith(".") for part in source.relative_to(corpus).parts):
            continue
        target = vault / source.relative_to(corpus)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        copied += 1
    return copied


def top_up(vault: Path, notes: int, round_no: int) -> None:
    """Deletes and folder moves outnumber creates over a long run: keep the vault its size."""
    present = sum(1 for p in vault.rglob("*.md") if ".trash" not in p.parts)
    rng = random.Random(round_no)
    for i in range(max(0, notes - present)):
        folder = vault / f"f{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"r{round_no}-{i}.md"
        target.write_text(random_text(rng, f"Round {round_no} note {i}"), encoding="utf-8")


def stop_leftover(root: Path) -> None:
    """A daemon of a failed round may still run: stop it by the pid its log names."""
    for line in reversed((root / "vaultd.log").read_text(errors="replace").splitlines()):
        if '"started"' in line and '"pid"' in line:
            pid = json.loads(line).get("pid")
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--notes", type=int, default=40, help="notes in the starting vault")
    parser.add_argument("--ops", type=int, default=80, help="most file operations per round")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    parser.add_argument(
        "--corpus",
        type=Path,
        help="start from this folder's notes (e.g. ../shared/corpora/obsidian-help/en) "
        "instead of --notes generated ones",
    )
    add_record_option(parser)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    root = args.keep or Path(tempfile.mkdtemp(prefix="vaultd-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    vault, outside, data = root / "vault", root / "outside", root / "data"
    outside.mkdir(exist_ok=True)
    if args.corpus:
        args.notes = seed_from(vault, args.corpus)
    else:
        seed(vault, args.notes)
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(root / "vaultd.toml", vault, data, socket, debounce="150ms")

    totals: dict[str, Any] = {
        "rounds": 0,
        "operations": 0,
        "queries": 0,
        "query_errors": 0,
        "kills": 0,
        "graceful_stops": 0,
        "reloads": 0,
        "sigstops": 0,
        "stealthy_edits": 0,
        "checks": 0,
        "divergences": 0,
        "failures": [],
    }
    started = time.monotonic()
    deadline = started + args.minutes * 60
    round_no = 0
    while time.monotonic() < deadline:
        round_no += 1
        top_up(vault, args.notes, round_no)
        try:
            verdict, count, ending, queries_ok = run_round(
                args, rng, round_no, config, socket, root, vault, outside, totals
            )
        except Exception as exc:  # the harness or the daemon failed: record it, go on
            totals["failures"].append(f"round {round_no}: {type(exc).__name__}: {exc}")
            verdict, count, ending, queries_ok = f"FAILED: {exc}", 0, "error", 0
            stop_leftover(root)
        totals["rounds"] = round_no
        elapsed = (time.monotonic() - started) / 60
        print(
            f"round {round_no} ({elapsed:.1f} min): {count} ops, ended by {ending}, "
            f"{queries_ok} queries, {verdict}",
            file=sys.stderr,
            flush=True,
        )

    totals["minutes"] = round((time.monotonic() - started) / 60, 1)
    totals["corpus"] = str(args.corpus) if args.corpus else None
    totals["restarts"] = totals["kills"] + totals["graceful_stops"]
    totals["machine"] = cpu_model()
    totals["notes_at_end"] = sum(1 for p in vault.rglob("*.md") if ".trash" not in p.parts)
    if args.json:
        print(json.dumps(totals, indent=2))
    else:
        for key, value in totals.items():
            print(f"{key:16} {value}")
    record(args.record, ["figure", "value"], report_rows(totals))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if totals["divergences"] or totals["failures"] else 0)


if __name__ == "__main__":
    main()
