"""What change detection costs when a stat is not trusted blindly (issue 35, finding 1).

    python -m bench.speed.detect_cost [VAULT ...] [--repeat 3] [--share 0.0417] [--cold]

VAULT defaults to ../shared/corpora/obsidian-hub. For each vault, with vaultd's own code:

1. The stat walk (`Discovery.walk`), as a restart and every full pass do it.
2. Every note read and hashed as a pass reads it (`Discovery.read_note`, SHA-256, the clock
   taken before each read): what the manifest then holds, with and without the stat fields of
   schema 9. This is also what a full pass that checks every note costs (`vaultd reindex`),
   and the one-time read of every note after the upgrade from schema 8.
3. A restart with nothing changed: the walk and the comparison with the manifest under the old
   rule (size and mtime) and under the new (`detect.scan`: ctime and inode too, and racy
   notes read again), with the reads the new rule asks for.
4. A scheduled full pass: the same, plus the share of the notes hashed longest ago read
   whatever their stat (`detect.due_for_check`), and one reading every note.

No model and no store: they do the same work before and after, and nothing is embedded when
nothing changed. Timings are medians of `--repeat` runs after one warm-up, so the page cache
holds the vault; each is given as wall time and as this process's CPU time, which a machine
loaded by other work changes far less. `--cold` also times a walk and a read of everything
after dropping the page cache (root only; it empties the cache of the whole machine, so not on
a shared one).
Prints a JSON object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from bench.lib.machine import cpu_model
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from vaultd.config import VaultSection
from vaultd.pipeline.detect import due_for_check, scan
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.records import FileState, KnownNote

DEFAULT_VAULT = CORPORA / "obsidian-hub"


def scan_before(known: Mapping[str, KnownNote], walk: Iterable[FileState]) -> list[FileState]:
    """The rule before schema 9: the size and mtime as recorded, and the note is not read."""
    candidates = []
    for state in walk:
        old = known.get(state.path)
        if not (old and old.ok and (old.size, old.mtime_ns) == (state.size, state.mtime_ns)):
            candidates.append(state)
    return candidates


def hash_notes(discovery: Discovery, paths: Iterable[str]) -> dict[str, KnownNote]:
    """Read and hash each note as the indexer does; what the manifest would then record."""
    out: dict[str, KnownNote] = {}
    for path in paths:
        hashed_ns = time.time_ns()
        data, st = discovery.read_note(path)
        out[path] = KnownNote(
            path,
            st.st_size,
            st.st_mtime_ns,
            hashlib.sha256(data).hexdigest(),
            True,
            0,
            ctime_ns=st.st_ctime_ns,
            inode=st.st_ino,
            hashed_ns=hashed_ns,
        )
    return out


def timed(repeat: int, work: Callable[[], Any], what: str) -> tuple[dict[str, float], Any]:
    """The median wall and CPU seconds of `repeat` runs after a warm-up, and the last run's
    result."""
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)
    work()
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        result = work()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return {
        "wall_s": round(statistics.median(walls), 3),
        "cpu_s": round(statistics.median(cpus), 3),
    }, result


def ratio(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: round(a[k] / b[k], 2) if b[k] else 0.0 for k in a}


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def measure(vault: Path, repeat: int, share: float, cold_too: bool) -> dict[str, Any]:
    discovery = Discovery(vault, IgnoreRules.from_config(VaultSection(path=vault)))
    load_before = os.getloadavg()
    walk_s, states = timed(repeat, lambda: list(discovery.walk()), f"{vault.name}: walk")
    paths = [s.path for s in states]
    hash_all_s, after = timed(repeat, lambda: hash_notes(discovery, paths), "read all")
    before = {
        p: KnownNote(p, k.size, k.mtime_ns, k.sha256, True, 0, quarantined=False)
        for p, k in after.items()
    }
    size_mb = sum(k.size for k in after.values()) / 1e6

    def restart_before() -> int:
        candidates = scan_before(before, discovery.walk())
        hash_notes(discovery, [s.path for s in candidates])
        return len(candidates)

    def pass_after(check: float) -> Callable[[], tuple[int, int]]:
        def run() -> tuple[int, int]:
            verify = due_for_check(after, check)
            result = scan(after, discovery.walk(), verify=verify)
            hash_notes(discovery, [s.path for s in result.candidates])
            return len(result.candidates), result.distrusted

        return run

    restart_before_s, read_before = timed(repeat, restart_before, "restart, before")
    restart_after_s, (read_after, racy) = timed(repeat, pass_after(0.0), "restart, after")
    share_s, (read_share, _) = timed(repeat, pass_after(share), "full pass, a share")
    all_s, (read_all, _) = timed(repeat, pass_after(1.0), "full pass, all")

    cold: dict[str, float] | None = None
    if cold_too and drop_caches():
        started = time.perf_counter()
        list(discovery.walk())
        cold_walk = time.perf_counter() - started
        drop_caches()
        started = time.perf_counter()
        hash_notes(discovery, paths)
        cold = {
            "walk_s": round(cold_walk, 2),
            "hash_all_s": round(time.perf_counter() - started, 2),
        }

    return {
        "vault": str(vault),
        "notes": len(states),
        "megabytes": round(size_mb, 1),
        "walk": walk_s,
        "read_all": hash_all_s,
        "restart": {
            "before": restart_before_s,
            "after": restart_after_s,
            "ratio": ratio(restart_after_s, restart_before_s),
            "notes_read_before": read_before,
            "notes_read_after": read_after,
            "racy": racy,
        },
        "full_pass": {
            "before": restart_before_s,
            "share": round(share, 4),
            "after_share": share_s,
            "share_ratio": ratio(share_s, restart_before_s),
            "share_notes_read": read_share,
            "after_all": all_s,
            "all_ratio": ratio(all_s, restart_before_s),
            "all_notes_read": read_all,
        },
        "cold_cache": cold if cold is not None else "not measured",
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vaults", nargs="*", type=Path, default=[DEFAULT_VAULT])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--share", type=float, default=1 / 24)
    parser.add_argument("--cold", action="store_true", help="also with the page cache dropped")
    add_record_option(parser)
    args = parser.parse_args()
    results = [measure(v.resolve(), args.repeat, args.share, args.cold) for v in args.vaults]
    out = {
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "vaults": results,
    }
    json.dump(out, sys.stdout, indent=2)
    print()
    columns = ["", *(f"{r['notes']:,} notes, {r['megabytes']} MB" for r in results)]
    record(args.record, columns, table(results))


def table(results: list[dict[str, Any]]) -> list[list[str]]:
    """A row per way of passing over the vault, a column per vault: CPU seconds, notes read."""
    ways = (
        # (row, the times' place in a result, its count of notes read, with the wall time)
        ("stat walk", ("walk",), None, True),
        ("restart, nothing changed: before", ("restart", "before"), "notes_read_before", False),
        ("restart: after", ("restart", "after"), "notes_read_after", False),
        ("full pass: after, a share read", ("full_pass", "after_share"), "share_notes_read", False),
        ("full pass reading every note", ("full_pass", "after_all"), "all_notes_read", True),
        ("reading and hashing every note alone", ("read_all",), None, True),
    )
    rows = []
    for name, place, read, wall in ways:
        cells = []
        for result in results:
            times = result[place[0]] if len(place) == 1 else result[place[0]][place[1]]
            cell = f"{times['cpu_s']:.2f} s CPU"
            cell += f" ({times['wall_s']:.2f} s wall)" if wall else ""
            cell += f", {result[place[0]][read]:,} read" if read else ""
            cells.append(cell)
        rows.append([name, *cells])
    return rows


if __name__ == "__main__":
    main()
