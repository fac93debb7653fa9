"""Both models at once: is a vault served better by fusing the default and the multilingual
model's vector rankings than by either alone?

    python -m bench.quality.two_models --lang en|zh [--default-workdir DIR]
        [--multilingual-workdir DIR]

The two workdirs are `help_eval.py`'s (`--workdir`, with `--model multilingual` for the second):
each holds a copy of the help vault and its index. Per question, each index gives its keyword
and vector candidates (100 chunks); the notes are ranked by their best chunk, and these note
rankings are fused by rank (RRF with search's k) with a weight for each model's vectors and 1 for
the keyword ranking (the multilingual index's, the same either way). For reference, each index's
own hybrid (chunk-level RRF with search's defaults). Scored as `help_eval.py` scores: hit@5 and
MRR@10, over the tuning half, the held-out half and all questions.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.lib.paths import QUESTIONS
from bench.lib.results import add_record_option, record
from bench.quality import help_eval as H
from vaultd.config import SearchSection, load_config
from vaultd.index.open import open_index
from vaultd.index.ranking import rrf
from vaultd.query import Filters, ParsedQuery

#: (default model's weight, multilingual model's weight) for their vector rankings.
WEIGHTS = ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (1.5, 1.0), (1.0, 0.5), (0.5, 1.0))

Lists = dict[int, dict[str, Any]]


def candidates(workdir: Path, questions: Sequence[H.Question]) -> Lists:
    config = load_config(workdir / "vaultd.toml", env=os.environ)
    out: Lists = {}
    with open_index(config, env=os.environ) as index:
        searcher = index.searcher
        for q in questions:
            keyword = searcher.keyword(ParsedQuery.parse(q.text), 100, None)
            vector = searcher.vector(q.text, 100, None, Filters())
            ids = sorted({i for i, _ in keyword + vector})
            paths = {i: c.path for i, c in index.manifest.notes.chunks_by_id(ids).items()}
            out[q.id] = {"keyword": keyword, "vector": vector, "paths": paths}
    return out


def notes(ranked: Sequence[tuple[str, float]], paths: dict[str, str]) -> list[str]:
    return H.distinct(paths[i] for i, _ in ranked if i in paths)


def score(
    questions: Sequence[H.Question], rank: Callable[[H.Question], list[str]], split: str
) -> str:
    result = H.Score()
    for q in questions:
        if (split == "tune" and q.id % 2 == 0) or (split == "test" and q.id % 2 == 1):
            continue
        result.add(q, rank(q))
    summary = result.summary()
    return f"{summary['hit@5']:.3f} / {summary['mrr@10']:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lang", choices=("en", "zh"), default="en")
    parser.add_argument("--default-workdir", type=Path)
    parser.add_argument("--multilingual-workdir", type=Path)
    add_record_option(parser)
    args = parser.parse_args()
    questions = H.load_questions(QUESTIONS / f"obsidian-help-{args.lang}.jsonl", "all")
    settings = SearchSection()
    default = candidates(args.default_workdir or Path(f"/tmp/{args.lang}-d"), questions)
    multi = candidates(args.multilingual_workdir or Path(f"/tmp/{args.lang}-m"), questions)

    def hybrid(lists: Lists) -> Callable[[H.Question], list[str]]:
        def rank(q: H.Question) -> list[str]:
            mine = lists[q.id]
            fused = rrf(
                {"keyword": mine["keyword"], "vector": mine["vector"]},
                settings.rrf_k,
                {"keyword": settings.keyword_weight, "vector": settings.vector_weight},
            )
            return notes(fused, mine["paths"])

        return rank

    def both(w_default: float, w_multi: float) -> Callable[[H.Question], list[str]]:
        def rank(q: H.Question) -> list[str]:
            d, m = default[q.id], multi[q.id]
            lists = {
                "keyword": [(p, 0.0) for p in notes(m["keyword"], m["paths"])],
                "default": [(p, 0.0) for p in notes(d["vector"], d["paths"])],
                "multilingual": [(p, 0.0) for p in notes(m["vector"], m["paths"])],
            }
            weights = {"keyword": 1.0, "default": w_default, "multilingual": w_multi}
            return [p for p, _ in rrf(lists, settings.rrf_k, weights)]

        return rank

    print(f"obsidian-help/{args.lang}, {len(questions)} questions; hit@5 / MRR@10")
    print(f"{'ranking':44s} {'tuning':>15s} {'held out':>15s} {'all':>15s}")
    rows: list[tuple[str, Callable[[H.Question], list[str]]]] = [
        ("default model's hybrid", hybrid(default)),
        ("multilingual model's hybrid", hybrid(multi)),
    ]
    rows += [(f"notes fused, vector weights {wd} / {wm}", both(wd, wm)) for wd, wm in WEIGHTS]
    table: list[list[str]] = []
    for name, rank in rows:
        cells = [score(questions, rank, split) for split in ("tune", "test", "all")]
        print(f"{name:44s} {cells[0]:>15s} {cells[1]:>15s} {cells[2]:>15s}")
        table.append([name, *cells])
    columns = [f"{args.lang}, hit@5 / MRR@10", "tuning", "held out", "all"]
    record(args.record, columns, table, align=["none"] * 4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
