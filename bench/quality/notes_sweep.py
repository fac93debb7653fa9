"""Choose what a note adds to its passages (`[search]` lead_weight, second_weight,
length_prior) on several labelled sets at once.

Each set is an index a benchmark built and kept with `--workdir`:

    python -m bench.quality.help_eval --workdir /tmp/en-d
    python -m bench.quality.help_eval --lang zh --model multilingual --workdir /tmp/zh-p
    python -m bench.quality.scifact_eval --workdir /tmp/sf
    python -m bench.quality.notes_sweep --help-en /tmp/en-d --help-zh /tmp/zh-p --scifact /tmp/sf

Every query is retrieved once by search's own retrievers (the notes' first passages included);
each point of the grid then ranks those candidates with search itself. A set scores its tuning
half (the help questions' odd ids, MRR@10; SciFact's odd query positions, nDCG@10), and the
objective is the mean over the sets; the held-out halves are printed beside it, never used.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from bench.lib.beir import dedupe, load_dataset, ndcg_at
from bench.lib.paths import QUESTIONS, SHARED
from bench.lib.results import add_record_option, record
from bench.quality.help_eval import K, Question, Score, distinct, load_questions
from vaultd.config import SearchSection, load_config
from vaultd.index.open import open_index
from vaultd.index.search import Searcher
from vaultd.query import MAX_K, SearchQuery

DEFAULT_BEIR = SHARED / "bench" / "scifact"
LEAD_WEIGHTS = (0.0, 1.0, 1.5, 2.0, 3.0)
SECOND_WEIGHTS = (0.0, 0.25, 0.5)
LENGTH_PRIORS = (0.0, 0.1, 0.2)


@dataclass(frozen=True)
class Query:
    text: str
    tune: bool
    #: The query's score for a ranking of note paths (k hits asked for).
    score: Callable[[list[str]], float]


def help_queries(lang: str) -> list[Query]:
    def scorer(question: Question) -> Callable[[list[str]], float]:
        def score(paths: list[str]) -> float:
            one = Score()
            one.add(question, distinct(paths))
            return float(one.rr10[0])

        return score

    questions = load_questions(QUESTIONS / f"obsidian-help-{lang}.jsonl", "all")
    return [Query(q.text, q.id % 2 == 1, scorer(q)) for q in questions]


def beir_queries(data: Path) -> list[Query]:
    dataset = load_dataset(data)

    def scorer(relevant: Mapping[str, int]) -> Callable[[list[str]], float]:
        return lambda paths: ndcg_at(dedupe(PurePosixPath(p).stem for p in paths), relevant, 10)

    return [
        Query(text, position % 2 == 0, scorer(dataset.qrels[qid]))
        for position, (qid, text) in enumerate(dataset.judged_queries())
    ]


def retrieve_once(searcher: Searcher) -> None:
    """Make the searcher retrieve each query once, with the first passages, whatever the
    settings; its ranking of the candidates still runs for every search."""
    memo: dict[tuple[Any, ...], Any] = {}
    original = searcher.retrieve

    def retrieve(  # type: ignore[no-untyped-def]
        query, parsed, mode, depth, paths=None, filters=None, rrf_k=None, *, leads=False
    ):
        key = (query, mode, depth, rrf_k)
        if key not in memo:
            memo[key] = original(query, parsed, mode, depth, paths, filters, rrf_k, leads=True)
        found = memo[key]
        return found if leads else {name: hits for name, hits in found.items() if name != "lead"}

    searcher.retrieve = retrieve  # type: ignore[method-assign]


def sweep(workdir: Path, queries: Sequence[Query], k: int) -> dict[tuple[float, ...], list[float]]:
    """Each grid point's (tune, held-out) mean score on one set."""
    config = load_config(workdir / "vaultd.toml", env=os.environ)
    out: dict[tuple[float, ...], list[float]] = {}
    with open_index(config) as index:
        retrieve_once(index.searcher)
        for point in itertools.product(LEAD_WEIGHTS, SECOND_WEIGHTS, LENGTH_PRIORS):
            lead, second, length = point
            settings = replace(
                config.search, lead_weight=lead, second_weight=second, length_prior=length
            )
            halves: dict[bool, list[float]] = {True: [], False: []}
            for query in queries:
                hits = index.searcher.search(
                    SearchQuery(query.text, k=k, mode="hybrid", settings=settings)
                ).hits
                halves[query.tune].append(query.score([h.path for h in hits]))
            out[point] = [sum(v) / max(1, len(v)) for v in (halves[True], halves[False])]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--help-en", type=Path, metavar="WORKDIR", help="help_eval.py's index")
    parser.add_argument("--help-zh", type=Path, metavar="WORKDIR", help="--lang zh's index")
    parser.add_argument("--scifact", type=Path, metavar="WORKDIR", help="scifact_eval.py's")
    parser.add_argument("--beir-data", type=Path, default=DEFAULT_BEIR)
    parser.add_argument("--top", type=int, default=12, help="grid points to print")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_record_option(parser)
    args = parser.parse_args(argv)
    sets: dict[str, tuple[Path, list[Query], int]] = {}
    if args.help_en:
        sets["help-en"] = (args.help_en, help_queries("en"), K)
    if args.help_zh:
        sets["help-zh"] = (args.help_zh, help_queries("zh"), K)
    if args.scifact:
        sets["scifact"] = (args.scifact, beir_queries(args.beir_data), MAX_K)
    if not sets:
        parser.error("give at least one of --help-en, --help-zh, --scifact")
    scores = {}
    for name, (workdir, queries, k) in sets.items():
        print(f"{name}: {len(queries)} queries", file=sys.stderr)
        scores[name] = sweep(workdir, queries, k)
    rows = []
    for point in itertools.product(LEAD_WEIGHTS, SECOND_WEIGHTS, LENGTH_PRIORS):
        names = ("lead_weight", "second_weight", "length_prior")
        row: dict[str, Any] = dict(zip(names, point, strict=True))
        for name in sets:
            row[name] = {"tune": round(scores[name][point][0], 4)}
            row[name]["held_out"] = round(scores[name][point][1], 4)
        row["objective"] = round(sum(row[n]["tune"] for n in sets) / len(sets), 4)
        rows.append(row)
    rows.sort(key=lambda r: -r["objective"])
    chosen = SearchSection()
    defaults = (chosen.lead_weight, chosen.second_weight, chosen.length_prior)
    is_default = [
        r for r in rows if (r["lead_weight"], r["second_weight"], r["length_prior"]) == defaults
    ]
    table = [
        [f"{r['lead_weight']}", f"{r['second_weight']}", f"{r['length_prior']}"]
        + [f"{r[n]['tune']:.4f} / {r[n]['held_out']:.4f}" for n in sets]
        + [f"{r['objective']:.4f}" + (" (the defaults)" if r in is_default else "")]
        for r in [*rows[: args.top], *(r for r in is_default if r not in rows[: args.top])]
    ]
    columns = ["lead", "second", "length", *(f"{n} tune / held out" for n in sets)]
    record(args.record, [*columns, "objective"], table)
    if args.json:
        print(json.dumps({"sets": list(sets), "defaults": is_default, "rows": rows}, indent=1))
        return 0
    heads = " | ".join(f"{n} tune / held out" for n in sets)
    print(f"lead second length | {heads} | objective")
    for row in [*rows[: args.top], {"mark": "defaults"}, *is_default]:
        if "mark" in row:
            print("-- the defaults --")
            continue
        cells = " | ".join(f"{row[n]['tune']:.4f} / {row[n]['held_out']:.4f}" for n in sets)
        print(
            f"{row['lead_weight']:4} {row['second_weight']:6} {row['length_prior']:6} | "
            f"{cells} | {row['objective']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
