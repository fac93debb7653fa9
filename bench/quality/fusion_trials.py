"""Ways to beat the naive fusion, each chosen on the tuning halves and scored on the held-out
ones: does any of them earn a place in hybrid search?

    python -m bench.quality.fusion_trials --scifact /tmp/sf53/vaultd.toml \\
        --help-index /tmp/k53-help/vaultd.toml [--record NAME]

The same sets and halves as `fusion_eval.py` (SciFact's judged claims, the help questions; odd
positions tune, even ones are held out), nDCG@10 of notes (one hit a note, k 100). Each trial
has a small grid; the point with the best mean of the two sets' tuning halves is kept, and only
then are the held-out halves scored. The trials:

- **naive RRF** (k 60, equal weights) of the keyword and vector runs, as `fusion_eval.py`;
- **note-level RRF**: each retriever's passages ranked as notes first (a note at the rank of its
  best passage), then fused, with the lead term of `ranking._with_notes`; grid over k, the
  vector weight and the lead weight;
- **convex**: min-max normalised best scores of each note, `alpha * keyword + (1 - alpha) *
  vector`, plus the lead term;
- **vector PRF**: the hybrid page as vaultd builds it, with the vector side searched again for
  the query vector plus `beta` times the mean of the first `m` hits' vectors (Rocchio).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from bench.lib.beir import load_dataset, ndcg_at
from bench.lib.paths import SHARED
from bench.lib.results import add_record_option, record
from bench.quality.fusion_eval import QUESTIONS, naive_rrf
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.index.ranking import LEAD_RRF_K, Ranked, page
from vaultd.query import check_query

DEPTH = 100
#: One query's material: its half, judgements, each run's notes in order, the notes' best
#: scores per run, and the vector-PRF pages by (m, beta).
Query = dict[str, Any]


def _notes(ranked: Ranked, note_of: Mapping[str, str]) -> dict[str, tuple[int, float]]:
    """Each note's rank among the notes of `ranked` and its best passage's score."""
    out: dict[str, tuple[int, float]] = {}
    for chunk_id, score in ranked:
        note = note_of.get(chunk_id)
        if note is not None and note not in out:
            out[note] = (len(out) + 1, score)
    return out


PRF = [(m, beta) for m in (1, 2, 3) for beta in (0.3, 0.6, 1.0)]


def gather(
    config: Path, queries: Iterable[tuple[int, str, Mapping[str, int]]], name: Any
) -> list[Query]:
    """Each query's runs, read once from the index at `config`."""
    out: list[Query] = []
    with open_index(load_config(config, env={}), env={}) as index:
        s = index.searcher
        settings = s.settings
        for position, text, relevant in queries:
            parsed = check_query(text)
            ranked, evidence = s._retrieve(text, parsed, "hybrid", DEPTH, leads=True)
            ids = {i for run in ranked.values() for i, _ in run}

            def hybrid(
                runs: dict[str, Ranked], parsed: Any = parsed, evidence: Any = evidence
            ) -> list[str]:
                hits = page(
                    s.manifest, s.embedder.model_id, parsed, "hybrid", runs, DEPTH, 1, False,
                    settings, evidence,
                )  # fmt: skip
                return [name(h.path) for h in hits]

            first = page(
                s.manifest, s.embedder.model_id, parsed, "hybrid", ranked, DEPTH, 1, False,
                settings, evidence,
            )  # fmt: skip
            vector = s.embedder.query_routes(text)[0].vector.reshape(-1)
            prf: dict[tuple[int, float], list[str]] = {}
            for m, beta in PRF:
                sources = [h.id for h in first[:m]]
                got = s.store.get(sources, with_vectors=True)
                moved = vector + beta * np.mean([got[i]["vector"] for i in sources], axis=0)
                prf[(m, beta)] = hybrid(
                    {**ranked, "vector": s.store.query(moved / np.linalg.norm(moved), DEPTH)}
                )
            note_of = {
                i: name(c.path) for i, c in s.manifest.notes.chunks_by_id(sorted(ids)).items()
            }
            out.append(
                {
                    "half": "test" if position % 2 == 0 else "tune",
                    "relevant": relevant,
                    "runs": {n: _notes(run, note_of) for n, run in ranked.items()},
                    "hybrid": [name(h.path) for h in first],
                    "prf": prf,
                }
            )
    return out


def note_rrf(q: Query, k: int, wv: float, wl: float) -> list[str]:
    runs = q["runs"]
    score: dict[str, float] = {}
    for run, weight, constant in (("keyword", 1.0, k), ("vector", wv, k), ("lead", wl, LEAD_RRF_K)):
        for note, (rank, _) in runs.get(run, {}).items():
            score[note] = score.get(note, 0.0) + weight / (constant + rank)
    return sorted(score, key=lambda n: (-score[n], n))


def convex(q: Query, alpha: float, wl: float) -> list[str]:
    def scaled(run: Mapping[str, tuple[int, float]]) -> dict[str, float]:
        if not run:
            return {}
        low = min(s for _, s in run.values())
        span = (max(s for _, s in run.values()) - low) or 1.0
        return {n: (s - low) / span for n, (_, s) in run.items()}

    keyword, vector = scaled(q["runs"].get("keyword", {})), scaled(q["runs"].get("vector", {}))
    score = {
        n: alpha * keyword.get(n, 0.0) + (1 - alpha) * vector.get(n, 0.0)
        for n in {*keyword, *vector}
    }
    for note, (rank, _) in q["runs"].get("lead", {}).items():
        score[note] = score.get(note, 0.0) + wl / (LEAD_RRF_K + rank)
    return sorted(score, key=lambda n: (-score[n], n))


Trial = tuple[str, Sequence[Any], Callable[[Query, Any], list[str]]]
TRIALS: list[Trial] = [
    ("vaultd hybrid", [None], lambda q, _: q["hybrid"]),
    (
        "naive RRF",
        [None],
        lambda q, _: naive_rrf([list(q["runs"]["keyword"]), list(q["runs"]["vector"])]),
    ),
    (
        "note-level RRF",
        list(itertools.product((5, 10, 20, 60), (1.0, 1.5, 2.0), (0.0, 0.5, 1.0, 1.5))),
        lambda q, p: note_rrf(q, *p),
    ),
    (
        "convex",
        list(itertools.product((0.3, 0.4, 0.5, 0.6, 0.7), (0.0, 0.2, 0.5, 1.0))),
        lambda q, p: convex(q, *p),
    ),
    ("vector PRF", PRF, lambda q, p: q["prf"][p]),
]


def mean_ndcg(queries: Sequence[Query], half: str, rank: Callable[[Query], list[str]]) -> float:
    kept = [q for q in queries if q["half"] == half]
    return sum(ndcg_at(rank(q), q["relevant"], 10) for q in kept) / len(kept)


def choose(
    sets: Mapping[str, Sequence[Query]],
    grid: Sequence[Any],
    rank: Callable[[Query, Any], list[str]],
) -> tuple[Any, dict[str, float]]:
    """The grid's point best on the tuning halves (summed over the sets), and its scores."""

    def tuned(point: Any) -> float:
        return sum(mean_ndcg(qs, "tune", lambda q: rank(q, point)) for qs in sets.values())

    best = max(grid, key=tuned)
    scores = {
        f"{name} {half}": round(mean_ndcg(qs, half, lambda q: rank(q, best)), 4)
        for name, qs in sets.items()
        for half in ("tune", "test")
    }
    return best, scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scifact", type=Path, required=True)
    parser.add_argument("--help-index", type=Path, required=True)
    add_record_option(parser)
    args = parser.parse_args()
    data = load_dataset(SHARED / "bench" / "scifact")
    claims = [(p, t, data.qrels[q]) for p, (q, t) in enumerate(data.judged_queries(), 1)]
    with QUESTIONS.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    questions = [
        (int(r["id"]), r["question"], {p: 1 for p in (r["path"], *r.get("also", ())) if p})
        for r in rows
    ]
    sets = {
        "scifact": gather(args.scifact, claims, lambda p: PurePosixPath(p).stem),
        "help": gather(args.help_index, questions, lambda p: p),
    }
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    table = []
    for trial, grid, rank in TRIALS:
        best, scores = choose(sets, grid, rank)
        report[trial] = {"chosen": best, **scores}
        table.append(
            [trial, "-" if best is None else str(best), *(f"{v:.4f}" for v in scores.values())]
        )
    print(json.dumps(report, indent=2))
    head = [
        "trial",
        "chosen on tune",
        "SciFact tune",
        "SciFact held out",
        "help tune",
        "help held out",
    ]
    record(args.record, head, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
