"""Hybrid against the naive fusion of its own runs: does vaultd's hybrid search beat a plain
reciprocal-rank fusion (RRF, k=60, equal weights) of the keyword and vector runs it is made of?

    python -m bench.quality.fusion_eval --scifact /tmp/sf53/vaultd.toml \\
        --help-index /tmp/k53-help/vaultd.toml [--split test] [--resamples 10000] [--record NAME]

Each query is searched in keyword, vector and hybrid mode in this process (k=100, one hit per
note: a document ranks where its best passage ranks); the naive fusion ranks the notes of the
keyword and vector pages by sum(1 / (60 + rank)). nDCG@10 per query, and for hybrid minus each
other run the mean difference with a 95% paired-bootstrap interval (queries resampled with
replacement; the interval excluding 0 is a difference the sample supports). The sets: SciFact's
judged claims (an index that `scifact_eval.py --workdir DIR` built) and the help questions
(`bench/data/questions/obsidian-help-en.jsonl`, the note answering each and its `also`).
`--split test` keeps the even-numbered questions and SciFact's even positions (the halves no
parameter was tuned on; docs/search.md), `tune` the odd ones. Ranking is deterministic, so the
figures do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from bench.lib.beir import load_dataset, ndcg_at
from bench.lib.paths import SHARED
from bench.lib.results import add_record_option, record
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.query import MAX_K, SearchQuery

RRF_K = 60
MODES = ("keyword", "vector", "hybrid")
QUESTIONS = Path(__file__).resolve().parents[1] / "data" / "questions" / "obsidian-help-en.jsonl"


def naive_rrf(runs: Sequence[Sequence[str]]) -> list[str]:
    scores: dict[str, float] = {}
    for run in runs:
        for rank, doc in enumerate(run, 1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores, key=lambda doc: (-scores[doc], doc))


def bootstrap(diffs: Sequence[float], resamples: int, seed: int = 53) -> tuple[float, float]:
    """The 95% percentile interval of the mean of `diffs` over paired resamples."""
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def evaluate(
    config: Path,
    queries: Sequence[tuple[str, Mapping[str, int]]],
    name_of: Any,
    resamples: int,
) -> dict[str, Any]:
    scores: dict[str, list[float]] = {m: [] for m in (*MODES, "naive rrf")}
    with open_index(load_config(config, env={}), env={}) as index:
        searcher = index.searcher
        for text, relevant in queries:
            ranked: dict[str, list[str]] = {}
            for mode in MODES:
                asked = SearchQuery(text, k=MAX_K, mode=mode, per_note=1)  # type: ignore[arg-type]
                hits = searcher.search(asked).hits
                ranked[mode] = list(dict.fromkeys(name_of(h.path) for h in hits))
            ranked["naive rrf"] = naive_rrf([ranked["keyword"], ranked["vector"]])
            for mode, ranking in ranked.items():
                scores[mode].append(ndcg_at(ranking, relevant, 10))
    n = len(queries)
    report: dict[str, Any] = {
        "queries": n,
        "ndcg@10": {m: round(sum(s) / n, 4) for m, s in scores.items()},
    }
    for other in ("naive rrf", "keyword", "vector"):
        diffs = [h - o for h, o in zip(scores["hybrid"], scores[other], strict=True)]
        low, high = bootstrap(diffs, resamples)
        report[f"hybrid - {other}"] = {
            "mean": round(sum(diffs) / n, 4),
            "95% interval": [round(low, 4), round(high, 4)],
        }
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scifact", type=Path, help="config of an index scifact_eval built")
    parser.add_argument("--help-index", type=Path, help="config of an index of help/en")
    parser.add_argument("--split", choices=("all", "tune", "test"), default="test")
    parser.add_argument("--resamples", type=int, default=10_000)
    add_record_option(parser)
    args = parser.parse_args()
    split: str = args.split

    def kept(position: int) -> bool:  # 1-based, as help_eval numbers the questions
        return split == "all" or (position % 2 == 0) == (split == "test")

    report: dict[str, Any] = {
        "split": args.split,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if args.scifact:
        data = load_dataset(SHARED / "bench" / "scifact")
        claims = [
            (text, data.qrels[qid])
            for position, (qid, text) in enumerate(data.judged_queries(), 1)
            if kept(position)
        ]
        report["scifact"] = evaluate(
            args.scifact, claims, lambda p: PurePosixPath(p).stem, args.resamples
        )
    if args.help_index:
        with QUESTIONS.open(encoding="utf-8") as lines:
            rows = [json.loads(line) for line in lines]
        questions = [
            (row["question"], {p: 1 for p in (row["path"], *row.get("also", ())) if p})
            for row in rows
            if kept(int(row["id"]))
        ]
        report["help"] = evaluate(args.help_index, questions, lambda p: p, args.resamples)
    print(json.dumps(report, indent=2))
    record(args.record, *table(report))
    return 0


def table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """nDCG@10 of each run, and hybrid's differences with their 95% intervals, a row a set."""
    others = ("naive rrf", "keyword", "vector")
    head = [f"set ({report['split']} half)", "queries", *MODES, "naive RRF"]
    head += [f"hybrid - {o} [95%]" for o in others]
    rows = []
    for name in ("scifact", "help"):
        if name not in report:
            continue
        part = report[name]
        cells = [name, str(part["queries"])]
        cells += [f"{part['ndcg@10'][m]:.4f}" for m in (*MODES, "naive rrf")]
        for other in others:
            diff = part[f"hybrid - {other}"]
            low, high = diff["95% interval"]
            cells.append(f"{diff['mean']:+.4f} [{low:+.4f}, {high:+.4f}]")
        rows.append(cells)
    return head, rows


if __name__ == "__main__":
    raise SystemExit(main())
