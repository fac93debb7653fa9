"""Fusion beyond the trials: does a method that re-searches with feedback, or scores notes by a
convex mix of keyword and cosine scores, beat the naive RRF of the keyword and vector runs?

    python -m bench.quality.fusion_research gather --scifact /tmp/sf53/vaultd.toml \\
        --help-index /tmp/k53-help/vaultd.toml [--cache /tmp/fusion-research]
    python -m bench.quality.fusion_research evaluate [--cache /tmp/fusion-research] \\
        [--db-copies DIR] [--resamples 10000] [--record NAME]

The same sets and halves as `fusion_eval.py` and `fusion_trials.py` (SciFact's judged claims,
the help questions; odd positions tune, even ones are held out), nDCG@10 of notes (one hit a
note, k 100). `gather` reads each index once into the cache: every passage (its note, its index
in the note, its vector) and, a query each, the query vector, the keyword, vector and lead runs
of the search (depth 100), each candidate's known-item tier, the keyword side's MATCH
expression, and the keyword, vector and hybrid pages. `evaluate` needs only the cache and, for
the RM3 method, copies of the two indexes' `vaultd.db` named `sf.db` and `help.db` in
`--db-copies` (without them RM3 is left out). The vector side is searched exactly (numpy over the
stored vectors) and BM25 is re-run on the copies, which reproduces the vector and keyword runs.

Each method has a small grid; the point with the best sum of the two sets' tuning means is kept,
and only then are the held-out halves scored, against the naive RRF of the keyword and vector
pages (`fusion_eval.py`'s baseline) and today's hybrid page, with 95% paired-bootstrap
intervals. Every method orders the notes by known-item tier first, as vaultd does. The methods:

- **vaultd hybrid (today)**: the hybrid page vaultd gives.
- **naive RRF**: k 60, equal weights, of the notes of the keyword and vector pages.
- **fused vector PRF**: the vector side searched again for the query vector moved towards the
  best passages of the first fusion's top m notes (Rocchio, weight beta), then fused again.
- **fused RM3**: the keyword side searched again with the n most telling words of the first
  fusion's top m notes OR-ed into its MATCH expression, then fused again.
- **convex, complete cosine, rank lead**: a note scores a * its best BM25 score plus (1 - a) *
  its best cosine (both min-max or z normalised), the cosine computed for every candidate rather
  than only those the vector run found, plus lw * 10 / (10 + its rank by its first passage).
- **CC-first**: a passage scores a * its min-max BM25 score plus (1 - a) * its min-max cosine
  over all candidates; a note scores its best passage plus lw * its first passage's score.
- **CC-first + fused Rocchio**: CC-first with the cosines taken against the query vector moved
  towards the naive fusion's top m notes.

Recorded as `bench/results/fusion-research.json` (2026-12-06): none beats the naive RRF on
SciFact's held-out half by an interval that excludes 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.lib.beir import load_dataset, ndcg_at
from bench.lib.paths import SHARED
from bench.lib.results import add_record_option, record
from bench.quality.fusion_eval import QUESTIONS, bootstrap, naive_rrf
from bench.quality.fusion_trials import Query, Trial, _notes, choose
from bench.quality.help_eval import load_questions
from vaultd.config import SearchSection, load_config
from vaultd.index import known
from vaultd.index.open import open_index
from vaultd.index.ranking import LEAD_RRF_K, Ranked, rrf
from vaultd.query import MAX_K, STOP_WORDS, Mode, SearchQuery, check_query, has_phrase
from vaultd.storage.keyword import KEYWORD_WEIGHTS

DEPTH = 100
CACHE = Path("/tmp/fusion-research")
MODES: tuple[Mode, ...] = ("keyword", "vector", "hybrid")
#: One index as cached, with what `load_sets` derives from it (the keys are `gather`'s).
Data = dict[str, Any]
Vector = npt.NDArray[np.floating[Any]]
#: The default [search] settings, which today's hybrid page was made with.
SETTINGS = SearchSection()


def gather(
    config: Path, queries: Iterable[tuple[int, str, Mapping[str, int]]], name: Callable[[str], str]
) -> Data:
    """The passages and each query's runs, read once from the index at `config`."""
    out: Data = {"queries": []}
    with open_index(load_config(config, env={}), env={}) as index:
        s = index.searcher
        rows = s.manifest.keyword._query("SELECT id, path, idx FROM chunks ORDER BY n", ())
        ids = [r[0] for r in rows]
        out["note"] = {r[0]: name(r[1]) for r in rows}
        out["idx"] = {r[0]: int(r[2]) for r in rows}
        got = s.store.get(ids, with_vectors=True)
        kept = [i for i in ids if i in got]
        out["ids"] = kept
        out["vectors"] = np.asarray([got[i]["vector"] for i in kept], dtype=np.float32)
        for position, text, relevant in queries:
            parsed = check_query(text)
            ranked, evidence = s._retrieve(text, parsed, "hybrid", DEPTH, leads=True)
            routes = s.embedder.query_routes(text)
            # One route is one query vector; a query split across models has no single one.
            assert len(routes) == 1
            extra = evidence.extra_terms
            words = parsed.word_match(s.common_words(parsed, bool(extra)))
            match = " OR ".join(p for p in (words, *extra) if p)
            cand = {i for run in ranked.values() for i, _ in run}
            tiers: dict[str, int] = {}
            for i, chunk in s.manifest.notes.chunks_by_id(sorted(cand)).items():
                body = "\n".join((chunk.title, chunk.chunk.section, chunk.chunk.text))
                exact = bool(parsed.phrases) and all(has_phrase(body, p) for p in parsed.phrases)
                level = evidence.tier(i, chunk.path, body)
                level = max(level, known.PHRASE) if exact else level
                if level:
                    tiers[i] = level
            pages = {}
            for mode in MODES:
                hits = s.search(SearchQuery(text, k=MAX_K, mode=mode, per_note=1)).hits
                pages[mode] = list(dict.fromkeys(name(h.path) for h in hits))
            out["queries"].append(
                {
                    "position": position,
                    "half": "test" if position % 2 == 0 else "tune",
                    "text": text,
                    "relevant": dict(relevant),
                    "qvec": routes[0].vector.reshape(-1).astype(np.float32),
                    "ranked": {k: list(v) for k, v in ranked.items()},
                    "tiers": tiers,
                    "match": match,
                    "pages": pages,
                }
            )
    return out


def load_sets(cache: Path, dbs: Path | None) -> dict[str, Data]:
    sets = {}
    for key in ("scifact", "help"):
        with (cache / f"{key}.pkl").open("rb") as f:
            d: Data = pickle.load(f)
        d["key"] = key
        d["row"] = {i: n for n, i in enumerate(d["ids"])}
        v = d["vectors"]
        d["unit"] = v / np.linalg.norm(v, axis=1, keepdims=True)
        d["count"] = Counter(d["note"].values())
        d["first"] = {d["note"][i]: i for i in d["ids"] if d["idx"][i] == 0}
        if dbs is not None:
            copy = dbs / ("sf.db" if key == "scifact" else "help.db")
            d["db"] = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
        # The methods are called with a query alone (fusion_trials' Trial), so each query
        # carries its index.
        for q in d["queries"]:
            q["data"] = d
        sets[key] = d
    return sets


def ordered(notes: Sequence[str], d: Data, q: Query) -> list[str]:
    """`notes` with the known-item tiers first, as vaultd's page orders them."""
    tiers: dict[str, int] = {}
    for i, level in q["tiers"].items():
        n = d["note"][i]
        tiers[n] = max(tiers.get(n, 0), level)
    return sorted(notes, key=lambda n: -tiers.get(n, 0))


def by_score(score: Mapping[str, float]) -> list[str]:
    return sorted(score, key=lambda n: (-score[n], n))


def lead_ranks(d: Data, keyword: Ranked, lead: Ranked) -> dict[str, int]:
    """Each note's rank by its first passage, as `ranking._lead_ranking` makes it."""
    firsts = [(i, s) for i, s in keyword if d["idx"][i] == 0]
    weights = {"keyword": SETTINGS.keyword_weight, "vector": SETTINGS.vector_weight}
    out: dict[str, int] = {}
    for r, (i, _) in enumerate(rrf({"vector": lead, "keyword": firsts}, LEAD_RRF_K, weights), 1):
        out.setdefault(d["note"][i], r)
    return out


def vaultd_scores(d: Data, keyword: Ranked, vector: Ranked, lead: Ranked) -> dict[str, float]:
    """The note scores of vaultd's hybrid page (one hit a note) for these runs, as
    `ranking._with_notes` makes them from the default settings."""
    weights = {"keyword": SETTINGS.keyword_weight, "vector": SETTINGS.vector_weight}
    own: dict[str, list[float]] = {}
    for i, s in rrf({"keyword": keyword, "vector": vector}, SETTINGS.rrf_k, weights):
        own.setdefault(d["note"][i], []).append(s)
    lead_rank = lead_ranks(d, keyword, lead) if lead else {}
    out = {}
    for n in set(own) | set(lead_rank):
        sc = own.get(n, [])
        second = SETTINGS.second_weight * sc[1] if len(sc) > 1 else 0.0
        lt = SETTINGS.lead_weight / (LEAD_RRF_K + lead_rank[n]) if n in lead_rank else 0.0
        factor = max(1, d["count"][n]) ** -SETTINGS.length_prior
        out[n] = ((sc[0] if sc else 0.0) + second + lt) * factor
    return out


def fused(d: Data, q: Query, keyword: Ranked, vector: Ranked, how: str) -> list[str]:
    """The notes of the two runs fused the naive way or vaultd's, tiers first."""
    if how == "naive":
        notes = [list(_notes(run, d["note"])) for run in (keyword, vector)]
        return ordered(naive_rrf(notes), d, q)
    return ordered(by_score(vaultd_scores(d, keyword, vector, q["ranked"].get("lead", []))), d, q)


def first_fusion(d: Data, q: Query, how: str) -> list[str]:
    return fused(d, q, q["ranked"]["keyword"], q["ranked"]["vector"], how)


def best_passages(d: Data, q: Query, notes: Sequence[str]) -> list[str]:
    """Each note's best candidate passage: its best vector one, else keyword, else lead."""
    want, out = set(notes), {}
    for run in ("vector", "keyword", "lead"):
        for i, _ in q["ranked"].get(run, []):
            n = d["note"][i]
            if n in want and n not in out:
                out[n] = i
    return [out[n] for n in notes if n in out]


def rocchio(d: Data, q: Query, first: str, m: int, beta: float) -> Vector:
    """The unit query vector plus beta x the mean unit vector of the best passages of the
    first fusion's top m notes, normalised."""
    qv: Vector = q["qvec"] / np.linalg.norm(q["qvec"])
    if not m or not beta:
        return qv
    fb = best_passages(d, q, first_fusion(d, q, first)[:m])
    if not fb:
        return qv
    moved: Vector = qv + beta * d["unit"][[d["row"][i] for i in fb]].mean(0)
    return moved / np.linalg.norm(moved)


def vsearch(d: Data, vec: Vector, n: int = DEPTH) -> Ranked:
    sims = d["unit"] @ (vec / np.linalg.norm(vec))
    top = np.argpartition(-sims, n)[:n]
    top = top[np.argsort(-sims[top])]
    return [(d["ids"][k], float(sims[k])) for k in top]


def bm25(d: Data, match: str, limit: int = DEPTH) -> Ranked:
    """`KeywordController.bm25` on a copy of the index's database."""
    weights = ", ".join(str(w) for w in KEYWORD_WEIGHTS)
    sql = (
        f"SELECT c.id, f.score FROM (SELECT rowid, -bm25(chunks_fts, {weights}) AS score "
        "FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY score DESC LIMIT ?) f "
        "JOIN chunks c ON c.n = f.rowid ORDER BY f.score DESC, c.path, c.start_line"
    )
    return [(r[0], float(r[1])) for r in d["db"].execute(sql, (match, limit))]


TOKEN = re.compile(r"[^\W_]+")


def texts(d: Data) -> dict[str, Counter[str]]:
    """Each passage's words, and (in d["df"]) in how many passages each word is, read once."""
    if "texts" not in d:
        tx: dict[str, Counter[str]] = {}
        df: Counter[str] = Counter()
        for i, title, text in d["db"].execute("SELECT id, title, text FROM chunks"):
            words = [
                t
                for t in TOKEN.findall(f"{title} {text}".lower())
                if len(t) > 2 and not t.isdigit() and t not in STOP_WORDS
            ]
            tx[i] = Counter(words)
            df.update(set(words))
        d["texts"], d["df"] = tx, df
    found: dict[str, Counter[str]] = d["texts"]
    return found


def rm3_terms(d: Data, q: Query, fb: Sequence[str], n: int) -> list[str]:
    """The n words of the passages `fb` with the highest summed tf x idf, not in the query."""
    tx = texts(d)
    df, total = d["df"], len(tx)
    asked = set(TOKEN.findall(q["text"].lower()))
    sc: Counter[str] = Counter()
    for i in fb:
        c = tx[i]
        length = sum(c.values()) or 1
        for t, f in c.items():
            # A word of one passage says nothing of the rest of the collection.
            if t not in asked and df[t] >= 2:
                sc[t] += f / length * np.log(total / df[t])
    return [t for t, _ in sc.most_common(n)]


#: The re-searched runs, by method, set, query and the parameters they depend on: the final
#: fusion does not change them, and the grids repeat them.
MEMO: dict[tuple[Any, ...], Ranked] = {}


def vector_prf(q: Query, p: tuple[str, int, float, str]) -> list[str]:
    first, m, beta, final = p
    d = q["data"]
    key = ("vprf", d["key"], q["position"], first, m, beta)
    if key not in MEMO:
        MEMO[key] = vsearch(d, rocchio(d, q, first, m, beta))
    return fused(d, q, q["ranked"]["keyword"], MEMO[key], final)


def rm3(q: Query, p: tuple[str, int, int, str]) -> list[str]:
    first, m, n, final = p
    d = q["data"]
    key = ("rm3", d["key"], q["position"], first, m, n)
    if key not in MEMO:
        terms = rm3_terms(d, q, best_passages(d, q, first_fusion(d, q, first)[:m]), n)
        more = " OR ".join(f'"{t}"' for t in terms)
        match = f"({q['match']}) OR {more}" if q["match"] else more
        MEMO[key] = bm25(d, match) if terms else q["ranked"]["keyword"]
    return fused(d, q, MEMO[key], q["ranked"]["vector"], final)


def candidates(runs: Mapping[str, Ranked]) -> list[str]:
    return list(dict.fromkeys(i for r in ("keyword", "vector", "lead") for i, _ in runs.get(r, [])))


def convex_rank_lead(q: Query, p: tuple[int, float, str, float, float]) -> list[str]:
    m, beta, how, a, lw = p
    d = q["data"]
    cands = candidates(q["ranked"])
    sims = d["unit"][[d["row"][i] for i in cands]] @ rocchio(d, q, "naive", m, beta)

    def norm(sc: dict[str, float]) -> dict[str, float]:
        v = np.array(list(sc.values()))
        if how == "minmax":
            lo, span = v.min(), (v.max() - v.min()) or 1.0
            return {k: (x - lo) / span for k, x in sc.items()}
        return {k: (x - v.mean()) / (v.std() or 1.0) for k, x in sc.items()}

    kw = norm({n: s for n, (_, s) in _notes(q["ranked"]["keyword"], d["note"]).items()})
    by_cosine = [(cands[k], float(sims[k])) for k in np.argsort(-sims)]
    cos = norm({n: s for n, (_, s) in _notes(by_cosine, d["note"]).items()})
    # A note the keyword run missed is as bad as its worst keyword note, not unscored.
    floor = min(kw.values(), default=0.0)
    sc = {n: a * kw.get(n, floor) + (1 - a) * c for n, c in cos.items()}
    if lw:
        for n, r in lead_ranks(d, q["ranked"]["keyword"], q["ranked"].get("lead", [])).items():
            if n in sc:
                sc[n] += lw * 10 / (10 + r)
    return ordered(by_score(sc), d, q)


def cc_first(
    d: Data, q: Query, a: float, lw: float, m: int = 0, beta: float = 0.25
) -> dict[str, float]:
    """CC-first's note scores.

    Candidates C = keyword run U vector run U lead run (passages). For each p in C:
      k(p) = (bm25(p) - min bm25) / (max bm25 - min bm25) over the keyword run, 0 if p is not in it;
      c(p) = (cos(q, p) - min_C cos) / (max_C cos - min_C cos), the cosine of every candidate
             (stored vectors; with m > 0, of the fused-Rocchio query vector instead);
      s(p) = a * k(p) + (1 - a) * c(p).
    A note scores max over its candidates of s + lw * s(its first passage) when that first
    passage is among C (else + 0).
    """
    runs = q["ranked"]
    qv = rocchio(d, q, "naive", m, beta)
    cands = candidates(runs)
    cos: dict[str, float] = dict(
        zip(cands, d["unit"][[d["row"][i] for i in cands]] @ qv, strict=True)
    )
    kwp = dict(runs["keyword"])
    klo, khi = (min(kwp.values()), max(kwp.values())) if kwp else (0.0, 1.0)
    clo, chi = min(cos.values()), max(cos.values())

    def s(i: str) -> float:
        k = (kwp[i] - klo) / ((khi - klo) or 1.0) if i in kwp else 0.0
        return a * k + (1 - a) * (cos[i] - clo) / ((chi - clo) or 1.0)

    sc: dict[str, float] = {}
    for i in cands:
        n, v = d["note"][i], s(i)
        if v > sc.get(n, -1e9):
            sc[n] = v
    if lw:
        cset = set(cands)
        for n in sc:
            f = d["first"].get(n)
            if f in cset:
                sc[n] += lw * s(f)
    return sc


A_GRID = (0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
LW_GRID = (0.25, 0.5, 0.75, 1.0)
TODAY: Trial = ("vaultd hybrid (today)", [None], lambda q, _: q["pages"]["hybrid"])
NAIVE: Trial = (
    "naive RRF",
    [None],
    lambda q, _: naive_rrf([q["pages"]["keyword"], q["pages"]["vector"]]),
)
RM3: Trial = (
    "fused RM3 (first fusion, m, terms, final fusion)",
    list(itertools.product(("naive", "vaultd"), (3, 5, 10), (5, 10, 20), ("naive", "vaultd"))),
    rm3,
)
METHODS: list[Trial] = [
    TODAY,
    NAIVE,
    (
        "fused vector PRF (first fusion, m, beta, final fusion)",
        list(
            itertools.product(
                ("naive", "vaultd"), (1, 3, 5, 10), (0.25, 0.5, 1.0, 2.0), ("naive", "vaultd")
            )
        ),
        vector_prf,
    ),
    RM3,
    (
        "convex, complete cosine, rank lead (m, beta, norm, a, lw)",
        [
            p
            for p in itertools.product(
                (0, 3, 5), (0.25, 0.5), ("minmax", "z"), (0.3, 0.4, 0.5, 0.6), (0, 0.1, 0.25, 0.5)
            )
            # With m = 0 there is no feedback, so beta changes nothing.
            if p[0] or p[1] == 0.25
        ],
        convex_rank_lead,
    ),
    (
        "CC-first (a, lw)",
        list(itertools.product(A_GRID, LW_GRID)),
        lambda q, p: ordered(by_score(cc_first(q["data"], q, *p)), q["data"], q),
    ),
    (
        "CC-first + fused Rocchio (m, beta, a, lw)",
        list(itertools.product((2, 3, 5), (0.25, 0.5), A_GRID, LW_GRID)),
        lambda q, p: ordered(
            by_score(cc_first(q["data"], q, p[2], p[3], p[0], p[1])), q["data"], q
        ),
    ),
]


def held_out(d: Data, rank: Callable[[Query, Any], list[str]], point: Any) -> list[float]:
    return [ndcg_at(rank(q, point), q["relevant"], 10) for q in d["queries"] if q["half"] == "test"]


def evaluate(cache: Path, dbs: Path | None, resamples: int) -> list[dict[str, Any]]:
    """Each method's chosen point, its means, and its held-out differences to the baselines
    (mean, 95% interval)."""
    sets = load_sets(cache, dbs)
    queries = {k: d["queries"] for k, d in sets.items()}
    baselines = {
        base: {k: held_out(d, rank, None) for k, d in sets.items()}
        for base, (_, _, rank) in (("naive", NAIVE), ("today", TODAY))
    }
    report = []
    for name, grid, rank in METHODS:
        if dbs is None and rank is rm3:
            continue
        best, means = choose(queries, grid, rank)
        row: dict[str, Any] = {"method": name, "chosen": best, **means}
        for k, d in sets.items():
            test = held_out(d, rank, best)
            for base, ref in baselines.items():
                diffs = [x - y for x, y in zip(test, ref[k], strict=True)]
                low, high = bootstrap(diffs, resamples)
                row[f"{k} - {base}"] = [
                    round(sum(diffs) / len(diffs), 4),
                    round(low, 4),
                    round(high, 4),
                ]
        report.append(row)
        print(json.dumps(row), flush=True)
    # What CC-first would cost in the search path: it alone, in Python, a SciFact query.
    d = sets["scifact"]
    started = time.perf_counter()
    for q in d["queries"]:
        cc_first(d, q, 0.25, 0.5)
    per = (time.perf_counter() - started) / len(d["queries"])
    print(json.dumps({"cc_first ms per query (scifact, python, depth 100)": round(per * 1000, 3)}))
    return report


def table(report: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    head = ["method", "chosen on tune"]
    for title in ("SciFact", "help"):
        head += [f"{title} tune", f"{title} held out", f"{title} held out - naive RRF [95%]"]
    rows = []
    for row in report:
        best = row["chosen"]
        cells = [row["method"], "-" if best is None else str(best)]
        for key in ("scifact", "help"):
            mean, low, high = row[f"{key} - naive"]
            cells += [f"{row[f'{key} tune']:.4f}", f"{row[f'{key} test']:.4f}"]
            cells.append(f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]")
        rows.append(cells)
    return head, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("gather", "evaluate"))
    parser.add_argument("--scifact", type=Path, help="config of an index scifact_eval built")
    parser.add_argument("--help-index", type=Path, help="config of an index of help/en")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"default {CACHE}")
    parser.add_argument(
        "--db-copies", type=Path, help="copies of the two vaultd.db: sf.db, help.db"
    )
    parser.add_argument("--resamples", type=int, default=10_000)
    add_record_option(parser)
    args = parser.parse_args()
    if args.what == "evaluate":
        record(args.record, *table(evaluate(args.cache, args.db_copies, args.resamples)))
        return 0
    if args.scifact is None or args.help_index is None:
        parser.error("gather reads both indexes: --scifact and --help-index")
    data = load_dataset(SHARED / "bench" / "scifact")
    claims = [(p, t, data.qrels[q]) for p, (q, t) in enumerate(data.judged_queries(), 1)]
    questions = [
        (q.id, q.text, {p: 1 for p in q.answers if p}) for q in load_questions(QUESTIONS, "all")
    ]
    args.cache.mkdir(parents=True, exist_ok=True)
    for key, config, qs, name in (
        ("help", args.help_index, questions, lambda p: p),
        ("scifact", args.scifact, claims, lambda p: PurePosixPath(p).stem),
    ):
        got = gather(config, qs, name)
        with (args.cache / f"{key}.pkl").open("wb") as f:
            pickle.dump(got, f)
        print(key, len(got["queries"]), "queries", got["vectors"].shape, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
