"""Known items: does search find the note a person half remembers? hit@1 and hit@10 through the
daemon's socket, in the default (hybrid) mode or another, for code before and after a change.
The questions are bench/data/questions/known-<vault>-{tune,heldout}.jsonl, which
`python -m bench.data.known_items` writes (the rule is there).

    python -m bench.quality.known_items measure --vault help --workdir /tmp/i38-help \\
        [--split heldout] [--mode hybrid] [--code before=/tmp/base-i38 --code after=.]
    python -m bench.quality.known_items latency --vault hub --workdir /tmp/i38-hub [--code ...]
        [--mode hybrid,vector] [--asked help]
    python -m bench.quality.known_items profile --vault hub --workdir /tmp/i38-hub [--mode keyword]

`measure` copies the vault into `--workdir` (kept: later runs re-index only what changed),
indexes it with `vaultd index` unless it is already, then for each `--code` (a checkout put
first on the daemon's PYTHONPATH) starts `vaultd run`, asks every question of the split over
the socket (k = 10) and counts a hit at rank r when the note is the r-th distinct note of the
page. Before and after run on the same index in one invocation; the machine's load is
recorded with the figures. `latency` times the same questions' searches (one client, after a
warm-up; with `--asked help`, the help questions in people's own words instead) and reports
p50 and p99, and the daemon's CPU time per search (which a loaded machine inflates far less
than the wall time). `profile` runs the same searches in this
process on the index as it stands (no daemon; the vector side is left out, so hybrid is timed
as keyword) and reports the wall time per search and per kind of SQL statement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.data.known_items import KINDS, VAULTS, load
from bench.lib.paths import REPO
from bench.lib.results import add_record_option, record
from bench.lib.stats import rank
from bench.lib.workdir import vault_copy
from bench.quality.fusion_eval import QUESTIONS
from harness.daemon import short_socket_dir, start, write_config
from vaultd.api.client import Client
from vaultd.query import Mode, SearchQuery


def prepare(vault: Path, workdir: Path, extra: str, index: bool) -> tuple[Path, Path]:
    copy = vault_copy(vault, workdir)
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(workdir / "vaultd.toml", copy, workdir / "data", socket, extra=extra)
    if index:
        subprocess.run(
            [sys.executable, "-m", "vaultd", "index", "-q", "--config", str(config)],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd="/",
        )
    return config, socket


def embedded(config: Path) -> str:
    """How much of the index has vectors, as `vaultd status` says it."""
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", "status", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd="/",
    )
    try:
        status = json.loads(done.stdout)
    except ValueError:
        return "unknown"
    return f"{status.get('embedded')} of {status.get('notes')} notes embedded"


def ask(client: Client, rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    by_kind: defaultdict[str, list[int]] = defaultdict(list)
    misses: list[dict[str, Any]] = []
    seconds: list[float] = []
    for row in rows:
        started = time.perf_counter()
        answer = client.request(
            "POST", "/v1/search", {"query": row["query"], "k": 10, "mode": mode}
        )
        seconds.append(time.perf_counter() - started)
        notes = list(dict.fromkeys(h["path"] for h in answer["hits"]))
        rank = notes.index(row["path"]) + 1 if row["path"] in notes else 0
        by_kind[row["kind"]].append(rank)
        if rank != 1:
            misses.append({"kind": row["kind"], "query": row["query"], "rank": rank,
                           "want": row["path"], "got": notes[:1]})  # fmt: skip
    out: dict[str, Any] = {}
    for kind in KINDS:
        ranks = by_kind.get(kind, [])
        if ranks:
            out[kind] = {
                "n": len(ranks),
                "hit@1": round(sum(r == 1 for r in ranks) / len(ranks), 3),
                "hit@10": round(sum(0 < r <= 10 for r in ranks) / len(ranks), 3),
            }
    out["latency"] = percentiles(seconds)
    out["misses"] = misses
    return out


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used (user and system): on a loaded machine a search's wall
    time is mostly waiting for a core, its CPU time is not."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(rank(ordered, 0.5) * 1000, 1),
        "p99_ms": round(rank(ordered, 0.99) * 1000, 1),
    }


def with_daemon(config: Path, socket: Path, code: str, log: Path, settle: float, call: Any) -> Any:
    """`call` with a client of a daemon running `code`, once it is ready or `settle` seconds
    after it answers (a vault still embedding is searched as it stands)."""
    env = {"PYTHONPATH": str(Path(code).resolve())}
    daemon = start(config, socket, log, env=env, wait_ready=False)
    try:
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            if daemon.request("GET", "/v1/health").get("status") == "ok":
                break
            time.sleep(0.5)
        return call(Client(socket), daemon.process.pid)
    finally:
        daemon.stop()


def _statement(sql: str, params: Any) -> str:
    """A short name for a SQL statement, for the profile (a MATCH by what it asks)."""
    match = str(params[0]) if params and isinstance(params[0], str) else ""
    if "bm25(" in sql:
        if "NEAR(" in match:
            return "bm25: proximity tier (NEAR)"
        if any(" " in part for part in match.split('"')[1::2]):
            return "bm25: phrase tiers"
        if " IN (SELECT rowid" in sql:
            return "bm25 with a requirement"
        return "bm25: the OR-ed words"
    if "fts" not in sql and "vocab" not in sql:
        return "other: " + " ".join(sql.split()[:4])[:50]
    if "highlight(" in sql:
        return "highlight"
    if "chunks_vocab" in sql:
        return "vocabulary"
    return "fts: " + " ".join(sql.split()[:6])[:60]


def profile(config: Path, rows: list[dict[str, Any]], mode: Mode, repeat: int) -> dict[str, Any]:
    """Searches in this process, timed per search and per kind of SQL statement."""
    from vaultd.config import load_config
    from vaultd.index import known
    from vaultd.index.search import Searcher
    from vaultd.query import check_query
    from vaultd.storage.manifest import Manifest

    settings = load_config(config)
    assert settings.store.path is not None, "an embedded store's data directory"
    spent: defaultdict[str, list[float]] = defaultdict(list)

    class TimedManifest(Manifest):
        """Every read timed: the controllers capture `query` as they are built."""

        def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
            started = time.perf_counter()
            try:
                return super().query(sql, params)
            finally:
                spent[_statement(sql, params)].append(time.perf_counter() - started)

    manifest = TimedManifest(settings.store.path)
    # Keyword mode needs of the embedder only its model's name (which hits await vectors).
    embedder = type("NoEmbedder", (), {"model_id": settings.embedding.model})()
    searcher = Searcher(manifest, None, embedder, settings.search)  # type: ignore[arg-type]
    keyword_mode: Mode = "keyword" if mode == "hybrid" else mode
    for row in rows[:20]:  # warm-up: the lexicon's snapshot, the stems, SQLite's pages
        searcher.search(SearchQuery(row["query"], 10, keyword_mode))
    spent.clear()
    samples: list[float] = []
    gather: list[float] = []
    for _ in range(repeat):
        for row in rows:
            started = time.perf_counter()
            searcher.search(SearchQuery(row["query"], 10, keyword_mode))
            samples.append(time.perf_counter() - started)
            started = time.perf_counter()
            parsed = check_query(row["query"])
            known.gather(manifest, searcher.lexicon, row["query"], parsed, 50, None)
            gather.append(time.perf_counter() - started)
    manifest.close()
    total = sum(samples)
    statements = {
        name: {"calls": len(times), "ms_per_search": round(sum(times) * 1000 / len(samples), 2),
               "share": round(sum(times) / total, 3)}
        for name, times in sorted(spent.items(), key=lambda item: -sum(item[1]))
    }  # fmt: skip
    return {
        "search": {**percentiles(samples), "n": len(samples)},
        "known.gather alone": percentiles(gather),
        "statements (the gather timings included)": statements,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("measure", "latency", "profile"))
    parser.add_argument("--vault", choices=sorted(VAULTS), required=True)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--split", choices=("tune", "heldout", "all"), default="heldout")
    parser.add_argument("--mode", default="hybrid")
    parser.add_argument("--repeat", type=int, default=1, help="latency: passes over the set")
    parser.add_argument(
        "--asked",
        choices=("known", "help"),
        default="known",
        help="latency: the known-item questions, or the 78 help questions in people's own "
        "words (bench/data/questions/obsidian-help-en.jsonl) asked of this vault",
    )
    parser.add_argument(
        "--code", action="append", default=[], help="NAME=CHECKOUT (default: after=this one)"
    )
    parser.add_argument(
        "--extra", default="", help="more config (e.g. '[embedding]\\ncpu_budget = 0.05')"
    )
    parser.add_argument(
        "--no-index", action="store_true", help="search the index as it stands (partly embedded)"
    )
    parser.add_argument("--settle", type=float, default=600, help="seconds to wait for ready")
    parser.add_argument("--json", type=Path, help="also write the report here")
    add_record_option(parser)
    args = parser.parse_args()
    os.chdir("/")  # the daemon's `python -m` puts its working directory first on sys.path
    workdir = (args.workdir or Path(f"/tmp/i38-{args.vault}")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    extra = args.extra.replace("\\n", "\n")
    index = not args.no_index and args.action != "profile"
    config, socket = prepare(VAULTS[args.vault], workdir, extra, index)
    rows = load(args.vault, args.split)
    if args.asked == "help":
        # Latency only: the questions' notes are help's, not this vault's.
        with QUESTIONS.open(encoding="utf-8") as lines:
            rows = [{"query": json.loads(line)["question"]} for line in lines]
    codes = [c.split("=", 1) for c in args.code] or [["after", str(REPO)]]
    report: dict[str, Any] = {
        "vault": args.vault,
        "split": args.split,
        "mode": args.mode,
        "questions": len(rows),
        "asked": args.asked,
        "load_before": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "embedded": embedded(config),
    }
    if args.action == "profile":
        report["profile"] = profile(config, rows, args.mode, args.repeat)
        report["load_after"] = os.getloadavg()
        print(json.dumps(report, indent=2))
        return 0
    for name, code in codes:
        log = workdir / f"daemon-{name}.log"
        if args.action == "measure":
            report[name] = with_daemon(
                config, socket, code, log, args.settle, lambda c, _: ask(c, rows, args.mode)
            )
        else:

            def timed(client: Client, pid: int) -> dict[str, Any]:
                # Several modes (`--mode hybrid,vector`) take turns on each question, so the
                # machine's load falls on all alike.
                modes = args.mode.split(",")
                samples: dict[str, list[float]] = {m: [] for m in modes}
                cpu: dict[str, float] = {m: 0.0 for m in modes}
                for row in rows[:20]:  # warm-up
                    for mode in modes:
                        client.request("POST", "/v1/search", {"query": row["query"], "mode": mode})
                for _ in range(args.repeat):
                    for row in rows:
                        for mode in modes:
                            body = {"query": row["query"], "k": 10, "mode": mode}
                            used = cpu_seconds(pid)
                            started = time.perf_counter()
                            client.request("POST", "/v1/search", body)
                            samples[mode].append(time.perf_counter() - started)
                            cpu[mode] += cpu_seconds(pid) - used
                out = {
                    m: {
                        **percentiles(samples[m]),
                        "n": len(samples[m]),
                        "daemon_cpu_ms": round(cpu[m] * 1000 / len(samples[m]), 1),
                    }
                    for m in modes
                }
                return out[modes[0]] if len(modes) == 1 else out

            report[name] = with_daemon(config, socket, code, log, args.settle, timed)
    report["load_after"] = os.getloadavg()
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    summary = {k: v for k, v in report.items() if k not in [c[0] for c in codes]}
    print(json.dumps(summary))
    for name, _ in codes:
        part = {k: v for k, v in report[name].items() if k != "misses"}
        print(name, json.dumps(part))
    names = [name for name, _ in codes]
    if args.action == "measure":
        record(args.record, *hits_table(report, names), align=["none"] * (len(KINDS) + 1))
    else:
        record(args.record, *latency_table(report, names))
    return 0


def hits_table(report: dict[str, Any], codes: list[str]) -> tuple[list[str], list[list[str]]]:
    """hit@1 / hit@10 by kind of question, a row per checkout."""
    head = f"{report['vault']}, {report['split']}, {report['mode']}, hit@1 / hit@10"
    rows = []
    for name in codes:
        part = report[name]
        counts = " / ".join(str(part[k]["n"]) if k in part else "0" for k in KINDS)
        cells = [
            f"{part[k]['hit@1']:.2f} / {part[k]['hit@10']:.2f}" if k in part else "-" for k in KINDS
        ]
        rows.append([f"{name} ({counts})", *cells])
    return [head, *KINDS], rows


def latency_table(report: dict[str, Any], codes: list[str]) -> tuple[list[str], list[list[str]]]:
    """p50, p99 and the daemon's CPU time per search, a row per checkout."""
    keys = ("p50_ms", "p99_ms", "daemon_cpu_ms")
    rows = []
    for name in codes:
        part = report[name]
        by_mode = part if "p50_ms" not in part else {"": part}
        for mode, figures in by_mode.items():
            label = f"{name} {mode}".strip()
            rows.append([label, *(f"{figures[key]:.1f} ms" for key in keys)])
    return [f"{report['vault']}, {report['mode']}", "p50", "p99", "daemon CPU per search"], rows


if __name__ == "__main__":
    raise SystemExit(main())
