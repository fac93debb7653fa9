"""Useful in the first minute: a cold daemon's first index of obsidian-hub, as a user meets it.

    python -m bench.speed.first_minute [--work DIR] [--baseline TREE] [--found 100] [--recent 200]

On a fresh copy of the vault (its notes given distinct modification times over three years,
seeded, so that "recently modified" means something) and a fresh data directory, `vaultd run`
is spawned cold and, over its socket and its manifest (read-only), the benchmark records:

1. for `--found` notes chosen at random, each with a phrase of four words found in no other
   note (taken from the text vaultd indexes), when a keyword search for the quoted phrase
   first returns the note; the time at which the last of them is found. The searches come in
   a burst every `--probe-every` seconds (all of them, found or not, until the first index
   is done: the same load on either tree), so a time is known to within that;
2. for the `--recent` most recently modified notes, when each has a vector for every chunk,
   and where that falls in the embedding phase (its start: the first status whose progress
   is the "embed" phase; its end: the daemon idle with nothing awaiting);
3. the whole first index: spawn until the daemon is idle with every note indexed.

With `--baseline TREE` (a checkout of an earlier vaultd, e.g. a `git worktree` of the commit
before the two phases), the same is measured with that tree's code first, on its own copy and
data, in the same run: step 3's ratio is the cost of the two phases (`--no-probe` measures it
with no probe at all).
Prints one JSON object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.lib.machine import machine
from bench.lib.paths import CORPORA, SHARED
from bench.lib.results import add_record_option, record
from harness.daemon import RunningDaemon, short_socket_dir, start, write_config
from vaultd.errors import NoteError
from vaultd.pipeline.parse import parse_note

SHARED = SHARED
THREE_YEARS = 3 * 365 * 86400
WORD = re.compile(r"^[A-Za-z]{3,}$")


def copy_vault(source: Path, target: Path, seed: int) -> dict[str, float]:
    """Copy the notes and give each a distinct mtime in the last three years."""
    shutil.copytree(source, target)
    rng = random.Random(seed)
    now = time.time()
    mtimes: dict[str, float] = {}
    for path in sorted(target.rglob("*.md")):
        when = now - rng.uniform(0, THREE_YEARS)
        os.utime(path, (when, when))
        mtimes[path.relative_to(target).as_posix()] = when
    return mtimes


def phrases(vault: Path, count: int, seed: int) -> dict[str, str]:
    """`count` random notes, each with four consecutive words of its indexed text that no
    other note holds (case-insensitive)."""
    texts: dict[str, str] = {}
    for file in sorted(vault.rglob("*.md")):
        rel = file.relative_to(vault).as_posix()
        try:
            note = parse_note(rel, file.read_bytes(), max_bytes=10 << 20)
        except NoteError:
            continue
        texts[rel] = "\n".join(b.text for b in note.blocks if b.kind == "paragraph")
    lowered = {p: t.lower() for p, t in texts.items()}
    rng = random.Random(seed)
    order = list(texts)
    rng.shuffle(order)
    chosen: dict[str, str] = {}
    for path in order:
        words = texts[path].split()
        windows = [words[i : i + 4] for i in range(len(words) - 3)]
        rng.shuffle(windows)
        for window in windows[:40]:
            if not all(WORD.match(w) for w in window):
                continue
            phrase = " ".join(window).lower()
            if sum(1 for t in lowered.values() if phrase in t) == 1:
                chosen[path] = phrase
                break
        if len(chosen) == count:
            break
    return chosen


class Watch(threading.Thread):
    """Polls status each second: when the embedding phase started, what the daemon said."""

    def __init__(self, daemon: RunningDaemon, spawned: float) -> None:
        super().__init__(daemon=True)
        self.daemon_ = daemon
        self.spawned = spawned
        self.stop = threading.Event()
        self.embed_started: float | None = None
        #: Set once the first reconcile is done (health "ok").
        self.ready = threading.Event()
        self.timeline: list[dict[str, Any]] = []

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                status = self.daemon_.request("GET", "/v1/status")
            except Exception:
                continue
            at = round(time.monotonic() - self.spawned, 1)
            if status.get("status") == "ok":
                self.ready.set()
            phase = (status.get("progress") or {}).get("phase")
            if phase == "embed" and self.embed_started is None:
                self.embed_started = at
            keys = ("notes", "found", "embedded", "awaiting")
            self.timeline.append({"t": at, "phase": phase, **{k: status.get(k) for k in keys}})


def vectors_in(manifest: Path, paths: list[str]) -> set[str]:
    """Those of `paths` with a vector for every chunk (the manifest read-only)."""
    db = sqlite3.connect(f"file:{manifest}?mode=ro", uri=True, timeout=30)
    try:
        model = db.execute("SELECT value FROM meta WHERE key = 'model'").fetchone()
        if model is None:
            return set()
        marks = ",".join("?" * len(paths))
        have = {
            r[0]
            for r in db.execute(f"SELECT DISTINCT path FROM chunks WHERE path IN ({marks})", paths)
        }
        waiting = {
            r[0]
            for r in db.execute(
                f"SELECT DISTINCT c.path FROM chunks c WHERE c.path IN ({marks}) AND NOT EXISTS "
                "(SELECT 1 FROM vectors v WHERE v.model = ? AND v.hash = c.hash)",
                [*paths, model[0]],
            )
        }
        return have - waiting
    except sqlite3.OperationalError:
        return set()  # not created yet, or busy: ask again
    finally:
        db.close()


def one_run(
    label: str, work: Path, source: Path, tree: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    root = work / label
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    vault = root / "vault"
    mtimes = copy_vault(source, vault, args.seed)
    wanted = phrases(vault, args.found, args.seed)
    recent = sorted(mtimes, key=lambda p: -mtimes[p])[: args.recent]
    socket = short_socket_dir() / "vaultd.sock"
    # The shipped pacing, as a user has it: bulk work yields to other programs' load (and
    # must not take the parser's worker processes for such).
    pacing = f"\n[embedding]\nyield_above = {args.yield_above}\n"
    config = write_config(
        root / "vaultd.toml", vault, root / "data", socket, debounce="300ms", extra=pacing
    )
    env = {"PYTHONPATH": str(tree)} if tree is not None else {}
    # `python -m` puts the working directory first on sys.path: run the tree's own code there.
    here = Path.cwd()
    os.chdir(tree or here)
    try:
        spawned = time.monotonic()
        daemon = start(
            config, socket, root / "vaultd.log", env=env, wait_ready=False, ready_timeout=600
        )
    finally:
        os.chdir(here)
    watch = Watch(daemon, spawned)
    watch.start()
    found: dict[str, float] = {}
    vectored: dict[str, float] = {}
    if args.no_probe:
        wanted, recent = {}, []  # only the time to idle: the probes' searches cost CPU
    try:
        # A burst of probes every `--probe-every` seconds for the whole first index, found or
        # not: the same load on both trees, whichever finds its notes sooner.
        while not watch.ready.is_set() and time.monotonic() - spawned < args.limit:
            burst = time.monotonic()
            for path, phrase in wanted.items():
                try:
                    hits = daemon.search(f'"{phrase}"', k=5, mode="keyword")
                except Exception:
                    continue
                if path not in found and path in {h["path"] for h in hits}:
                    found[path] = time.monotonic() - spawned
            if recent:
                at = time.monotonic() - spawned
                for path in vectors_in(root / "data" / "vaultd.db", recent):
                    vectored.setdefault(path, at)
            if args.found_only and len(found) == len(wanted):
                break
            watch.ready.wait(max(0.0, args.probe_every - (time.monotonic() - burst)))
        while not args.found_only:  # the rest of the first index
            try:
                daemon.wait_idle(timeout=60)
                break
            except Exception:
                if time.monotonic() - spawned > 4 * 3600:
                    raise
        total = time.monotonic() - spawned
        status = daemon.request("GET", "/v1/status") if not args.found_only else {}
    finally:
        watch.stop.set()
        daemon.stop(signal.SIGTERM, timeout=120)
    embed_start = watch.embed_started
    out: dict[str, Any] = {
        "tree": str(tree) if tree else "this checkout",
        "notes": status.get("notes"),
        "chunks": status.get("chunks"),
        "first_index_s": round(total, 1),
        "phrases_found": f"{len(found)}/{len(wanted)}",
        "last_phrase_found_s": round(max(found.values()), 1) if found else None,
        "phrase_found_p50_s": round(sorted(found.values())[len(found) // 2], 1) if found else None,
        "recent_vectored": f"{len(vectored)}/{len(recent)}",
        "last_recent_vector_s": round(max(vectored.values()), 1) if vectored else None,
        "embed_phase_start_s": embed_start,
        "last_reconcile": status.get("last_reconcile"),
        "timeline": watch.timeline[:: max(1, len(watch.timeline) // 30)],
    }
    if embed_start is not None and vectored:
        span = total - embed_start
        out["recent_vectored_share_of_embed_phase"] = round(
            (max(vectored.values()) - embed_start) / span, 4
        )
    return out


#: The runs of a result, and their columns in the recorded table.
RUNS = (("baseline", "before (`--baseline`)"), ("two_phases", "two phases"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, default=CORPORA / "obsidian-hub")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vaultd-first-minute"))
    parser.add_argument("--baseline", type=Path, help="a checkout of vaultd before the phases")
    parser.add_argument("--found", type=int, default=100)
    parser.add_argument("--recent", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=float, default=7200, help="seconds to poll at most")
    parser.add_argument(
        "--probe-every", type=float, default=5.0, help="seconds between two bursts of probes"
    )
    parser.add_argument(
        "--yield-above", type=float, default=0.5, help="[embedding] yield_above (the default)"
    )
    parser.add_argument(
        "--found-only",
        action="store_true",
        help="stop once every phrase is found: step 1 alone (no step 2 or 3)",
    )
    parser.add_argument(
        "--no-probe",
        action="store_true",
        help="no searches or manifest reads during the index: step 3 alone, at full speed",
    )
    add_record_option(parser)
    args = parser.parse_args()
    if not args.vault.is_dir():
        print(f"no vault at {args.vault}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "vault": str(args.vault),
        "load_before": os.getloadavg()[0],
    }
    if args.baseline is not None:
        result["baseline"] = one_run("baseline", args.work, args.vault, args.baseline, args)
    result["two_phases"] = one_run("two-phases", args.work, args.vault, None, args)
    result["load_after"] = os.getloadavg()[0]
    if args.baseline is not None:
        result["first_index_ratio"] = round(
            result["two_phases"]["first_index_s"] / result["baseline"]["first_index_s"], 4
        )
    print(json.dumps(result, indent=2))
    runs = [(name, result[key]) for key, name in RUNS if key in result]
    record(args.record, ["", *(name for name, _ in runs)], table([run for _, run in runs]))
    return 0


def table(runs: list[dict[str, Any]]) -> list[list[str]]:
    """A row per figure, a column per tree."""

    def seconds(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f} s"

    rows = [
        ["last note found by its phrase", *(seconds(r["last_phrase_found_s"]) for r in runs)],
        ["notes found by their phrase", *(r["phrases_found"] for r in runs)],
        ["median of the notes found", *(seconds(r["phrase_found_p50_s"]) for r in runs)],
        ["embedding phase starts (status)", *(seconds(r["embed_phase_start_s"]) for r in runs)],
        ["newest notes all have vectors", *(seconds(r["last_recent_vector_s"]) for r in runs)],
        ["newest notes with vectors", *(r["recent_vectored"] for r in runs)],
        ["whole first index, spawn to idle", *(seconds(r["first_index_s"]) for r in runs)],
    ]
    return rows


if __name__ == "__main__":
    sys.exit(main())
