"""Retrieval quality on Obsidian's help vault: hit@5 and MRR@10 per mode, on labelled questions.

The questions (`bench/data/questions/obsidian-help-en.jsonl`) are written in a user's own words,
each with the note that answers it (`path`) and, where two notes answer it equally, the other one
(`also`). A copy of the vault is indexed with the defaults, then every question is searched in
each mode. Ranks count notes, not passages: a note ranks where its best passage ranks.

    python -m bench.quality.help_eval [--workdir DIR] [--split all|tune|test] [--modes LIST]
        [--json]
    python -m bench.quality.help_eval --lang zh --model multilingual [--split tune|test]
    python -m bench.quality.help_eval --sweep [--beir-workdir DIR]   # choose the fusion parameters

`--split tune` takes the odd-numbered questions, `--split test` the even-numbered ones: the
fusion parameters were chosen on the first and are reported on both (docs/search.md).
`--sweep` retrieves each question's candidates once and scores a grid of fusion parameters
(RRF k, candidates per retriever, retriever weights) and BM25 column weights on both halves;
with `--beir-workdir` (an index that `scifact_eval.py --workdir DIR` built) SciFact's halves
(odd and even query positions) are scored too and the objective averages the two sets.

`--lang zh` takes the Chinese help vault and its questions (`obsidian-help-zh.jsonl`, written
the same way); `--model` is `[embedding] model` ("default" or "multilingual").

VAULT defaults to ../shared/corpora/obsidian-help/en beside the checkout; it is copied, never
changed. Without --workdir the copy and its index go to a temporary directory; with it they are
kept and a later run re-indexes only what changed, which for the same vault is nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from bench.lib.beir import load_dataset, ndcg_at
from bench.lib.paths import CORPORA, QUESTIONS, SHARED
from bench.lib.results import add_record_option, record
from vaultd.config import NAMED_MODELS, EmbeddingSection, SearchSection, load_config
from vaultd.index.open import Index, open_index
from vaultd.index.ranking import rrf
from vaultd.query import MODES, Filters, Mode, ParsedQuery, SearchQuery
from vaultd.storage.keyword import KEYWORD_WEIGHTS

HELP = CORPORA / "obsidian-help"
DEFAULT_BEIR = SHARED / "bench" / "scifact"
#: Passages asked for per question: enough for ten distinct notes under the per-note cap.
K = 50

#: The sweep's grid. Only the ratio of the two RRF weights changes a ranking, so the keyword
#: weight stays 1.
RRF_KS = (1, 5, 10, 20, 40, 60, 100)
CANDIDATES = (20, 50, 100)
VECTOR_WEIGHTS = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0)
COLUMN_WEIGHTS = ((1.0, 1.0, 1.0, 1.0), (2.0, 2.0, 1.0, 1.0), (4.0, 4.0, 2.0, 1.0))
#: Sweep depth: candidates retrieved once per query, cut to each grid point's `candidates`.
DEPTH = 100


@dataclass(frozen=True, slots=True)
class Question:
    id: int
    text: str
    answers: tuple[str, ...]


@dataclass
class Score:
    hits5: list[float] = field(default_factory=list)
    rr10: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    misses: list[dict[str, Any]] = field(default_factory=list)

    def add(self, question: Question, notes: Sequence[str]) -> None:
        rank = next((i for i, p in enumerate(notes[:10], 1) if p in question.answers), None)
        self.hits5.append(1.0 if rank is not None and rank <= 5 else 0.0)
        self.rr10.append(1.0 / rank if rank is not None else 0.0)
        if rank is None or rank > 5:
            self.misses.append(
                {"id": question.id, "question": question.text, "rank": rank, "top": notes[:3]}
            )

    def summary(self) -> dict[str, Any]:
        n = max(1, len(self.hits5))
        out: dict[str, Any] = {
            "hit@5": round(sum(self.hits5) / n, 4),
            "mrr@10": round(sum(self.rr10) / n, 4),
        }
        if self.latency_ms:
            ordered = sorted(self.latency_ms)
            out["latency_p50_ms"] = round(ordered[len(ordered) // 2], 2)
        return out


def load_questions(path: Path, split: str) -> list[Question]:
    out: list[Question] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            row = json.loads(line)
            qid = int(row["id"])
            if (split == "tune" and qid % 2 == 0) or (split == "test" and qid % 2 == 1):
                continue
            answers = (row["path"], *row.get("also", ()))
            out.append(Question(qid, row["question"], tuple(answers)))
    return out


def copy_vault(source: Path, target: Path) -> int:
    """Mirror the vault's notes into `target`, leaving unchanged files (and mtimes) alone."""
    wanted: set[Path] = set()
    written = 0
    for file in source.rglob("*.md"):
        rel = file.relative_to(source)
        wanted.add(rel)
        dest = target / rel
        data = file.read_bytes()
        if dest.is_file() and dest.read_bytes() == data:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        written += 1
    for file in list(target.rglob("*.md")):
        if file.relative_to(target) not in wanted:
            file.unlink()
    return written


def write_config(
    workdir: Path,
    threads: int,
    precision: str = EmbeddingSection().precision,
    model: str = "default",
    max_tokens: int | None = None,
) -> Path:
    config = workdir / "vaultd.toml"
    config.write_text(
        f"[vault]\npath = {json.dumps(str(workdir / 'vault'))}\n"
        f"[store]\npath = {json.dumps(str(workdir / 'data'))}\n"
        f'[embedding]\nthreads = {threads}\nprecision = "{precision}"\nmodel = "{model}"\n'
        + (f"[chunking]\nmax_tokens = {max_tokens}\n" if max_tokens else "")
        + '[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    return config


#: `--known`: the runs of each mode, with the known-item rules (True) and without.
KNOWN: dict[str, tuple[bool, ...]] = {"on": (True,), "off": (False,), "both": (False, True)}


def distinct(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def evaluate(
    index: Index,
    questions: Sequence[Question],
    modes: Sequence[Mode],
    known: Sequence[bool] = (True,),
) -> dict[str, Any]:
    """Each mode's scores; with `known` (False, True) each mode also without the known-item
    rules (tiers and typo corrections), as "<mode>, known off", the two taking turns."""
    runs = [(mode, on) for mode in modes for on in known]
    label = {(mode, on): mode if on else f"{mode}, known off" for mode, on in runs}
    scores = {label[run]: Score() for run in runs}
    searcher = index.searcher
    for mode in modes:  # warm-up: the first call of each mode pays for lazy loading
        searcher.search(SearchQuery(questions[0].text, k=K, mode=mode))
    for question in questions:
        for mode, on in runs:
            started = time.perf_counter()
            hits = searcher.search(SearchQuery(question.text, k=K, mode=mode, known_items=on)).hits
            score = scores[label[mode, on]]
            score.latency_ms.append((time.perf_counter() - started) * 1000)
            score.add(question, distinct(h.path for h in hits))
    return {
        "modes": {mode: s.summary() for mode, s in scores.items()},
        "misses": {mode: s.misses for mode, s in scores.items()},
    }


Lists = dict[Any, tuple[list[tuple[str, float]], list[tuple[str, float]]]]


def candidate_lists(
    index: Index, queries: Sequence[tuple[Any, str]], columns: tuple[float, ...]
) -> tuple[Lists, dict[str, str]]:
    """Per query: (keyword, vector) candidates at DEPTH, and the note path of every chunk."""
    searcher, manifest = index.searcher, index.manifest
    lists: Lists = {}
    for qid, text in queries:
        # The keyword side as search runs it: words, and pairs of unspaced-script text.
        keyword = searcher.keyword(ParsedQuery.parse(text), DEPTH, None, weights=columns)
        lists[qid] = (keyword, searcher.vector(text, DEPTH, None, Filters()))
    ids = {i for pair in lists.values() for ranked in pair for i, _ in ranked}
    paths = {i: c.path for i, c in manifest.notes.chunks_by_id(sorted(ids)).items()}
    return lists, paths


def fused_notes(
    pair: tuple[list[tuple[str, float]], list[tuple[str, float]]],
    paths: dict[str, str],
    rrf_k: int,
    candidates: int,
    vector_weight: float,
) -> list[str]:
    lists = {"keyword": pair[0][:candidates], "vector": pair[1][:candidates]}
    fused = rrf(lists, rrf_k, {"keyword": 1.0, "vector": vector_weight})
    return distinct(paths[i] for i, _ in fused if i in paths)


def sweep(
    index: Index, questions: Sequence[Question], beir: tuple[Index, Any] | None
) -> list[dict[str, Any]]:
    """Score every grid point on both halves of the questions (and of the BEIR queries).

    The objective is help MRR@10 on the tuning half, averaged with BEIR nDCG@10 on its tuning
    half (the odd-numbered queries) when a BEIR index is given.
    """
    halves = {
        "tune": [q for q in questions if q.id % 2 == 1],
        "test": [q for q in questions if q.id % 2 == 0],
    }
    rows: list[dict[str, Any]] = []
    for columns in COLUMN_WEIGHTS:
        help_lists, help_paths = candidate_lists(
            index, [(q.id, q.text) for q in questions], columns
        )
        beir_lists: Lists = {}
        beir_paths: dict[str, str] = {}
        if beir is not None:
            beir_index, dataset = beir
            queries = dataset.judged_queries()
            beir_lists, beir_paths = candidate_lists(beir_index, queries, columns)
            beir_halves = {"tune": queries[0::2], "test": queries[1::2]}
        for rrf_k, candidates, vector_weight in itertools.product(
            RRF_KS, CANDIDATES, VECTOR_WEIGHTS
        ):
            row: dict[str, Any] = {
                "columns": columns,
                "rrf_k": rrf_k,
                "candidates": candidates,
                "vector_weight": vector_weight,
            }
            for half, members in halves.items():
                score = Score()
                for q in members:
                    notes = fused_notes(
                        help_lists[q.id], help_paths, rrf_k, candidates, vector_weight
                    )
                    score.add(q, notes)
                summary = score.summary()
                row[f"{half}_hit@5"], row[f"{half}_mrr@10"] = summary["hit@5"], summary["mrr@10"]
                if beir is not None:
                    total = 0.0
                    for qid, _ in beir_halves[half]:
                        notes = fused_notes(
                            beir_lists[qid], beir_paths, rrf_k, candidates, vector_weight
                        )
                        ranking = [PurePosixPath(p).stem for p in notes]
                        total += ndcg_at(ranking, dataset.qrels[qid], 10)
                    row[f"{half}_ndcg@10"] = round(total / len(beir_halves[half]), 4)
            parts = [row["tune_mrr@10"]] + ([row["tune_ndcg@10"]] if beir is not None else [])
            row["objective"] = round(sum(parts) / len(parts), 4)
            rows.append(row)
    rows.sort(key=lambda r: (-r["objective"], -r["tune_hit@5"], r["rrf_k"], r["candidates"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--lang", choices=("en", "zh"), default="en", help="which help vault and question set"
    )
    parser.add_argument("--vault", type=Path, help="the help vault (read; default: --lang's)")
    parser.add_argument("--questions", type=Path, help="default: --lang's question set")
    parser.add_argument("--model", choices=NAMED_MODELS, default="default")
    parser.add_argument("--workdir", type=Path, help="keep the copy and its index here, reused")
    parser.add_argument(
        "--max-tokens", type=int, help="[chunking] max_tokens (default: the config's default)"
    )
    parser.add_argument("--split", choices=("all", "tune", "test"), default="all")
    parser.add_argument("--modes", default="keyword,vector,hybrid", help="comma-separated")
    parser.add_argument(
        "--known",
        choices=sorted(KNOWN),
        default="on",
        help="the known-item rules (tiers, typo corrections): on, off, or both in one run",
    )
    parser.add_argument("--sweep", action="store_true", help="score the fusion parameter grid")
    parser.add_argument(
        "--beir-workdir",
        type=Path,
        help="with --sweep: also score the BEIR index that `scifact_eval.py --workdir DIR` built",
    )
    parser.add_argument("--beir-data", type=Path, default=DEFAULT_BEIR, help="its BEIR data")
    parser.add_argument("--top", type=int, default=15, help="sweep rows to print")
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads (0: auto)")
    parser.add_argument(
        "--precision",
        choices=("float", "int8"),
        default=EmbeddingSection().precision,
        help="[embedding] precision; give each its own --workdir",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-q", "--quiet", action="store_true")
    add_record_option(parser)
    args = parser.parse_args(argv)
    modes: list[Mode] = [m for m in MODES if m in args.modes.split(",")]
    args.vault = args.vault or HELP / args.lang
    args.questions = args.questions or QUESTIONS / f"obsidian-help-{args.lang}.jsonl"
    if not args.vault.is_dir():
        print(f"no vault at {args.vault}", file=sys.stderr)
        return 2
    swept = args.sweep
    questions = load_questions(args.questions, "all" if swept else args.split)

    def log(m: str) -> None:
        if not args.quiet:
            print(m, file=sys.stderr)

    report: dict[str, Any] = {"split": "all" if swept else args.split}
    report["precision"] = args.precision
    report["model"] = args.model
    report["lang"] = args.lang
    report["questions"] = len(questions)
    with tempfile.TemporaryDirectory(prefix="vaultd-help-") as scratch:
        workdir = (args.workdir or Path(scratch)).resolve()
        (workdir / "vault").mkdir(parents=True, exist_ok=True)
        written = copy_vault(args.vault, workdir / "vault")
        config = load_config(
            write_config(workdir, args.threads, args.precision, args.model, args.max_tokens),
            env=os.environ,
        )
        with open_index(config) as index, contextlib.ExitStack() as stack:
            started = time.perf_counter()
            summary = index.indexer.reconcile()
            seconds = time.perf_counter() - started
            log(
                f"vault: {written} notes copied; index: {summary.chunks_embedded} chunks "
                f"embedded, {summary.chunks_reused} reused in {seconds:.1f} s"
            )
            report["index"] = {**index.manifest.counts(), "seconds": round(seconds, 1)}
            if args.sweep:
                beir = None
                if args.beir_workdir is not None:
                    beir_config = load_config(args.beir_workdir / "vaultd.toml", env=os.environ)
                    beir_index = stack.enter_context(open_index(beir_config))
                    beir = (beir_index, load_dataset(args.beir_data))
                rows = sweep(index, questions, beir)
                chosen = SearchSection()
                report["defaults"] = [
                    r
                    for r in rows
                    if r["columns"] == KEYWORD_WEIGHTS
                    and (r["rrf_k"], r["candidates"], r["vector_weight"])
                    == (
                        chosen.rrf_k,
                        chosen.candidates,
                        chosen.vector_weight / chosen.keyword_weight,
                    )
                ]
                report["best"] = rows[: args.top]
            else:
                report.update(evaluate(index, questions, modes, KNOWN[args.known]))
    report["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(render(report))
    if "modes" in report:
        record(args.record, *table(report))
    return 0


def table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The modes' figures as docs/benchmarks.md tables them (a sweep is not recorded)."""
    rows = [
        [mode, f"{m['hit@5']:.3f}", f"{m['mrr@10']:.3f}", f"{m.get('latency_p50_ms', 0):.1f} ms"]
        for mode, m in report["modes"].items()
    ]
    return ["mode", "hit@5", "MRR@10", "p50"], rows


def render(report: dict[str, Any]) -> str:
    index = report["index"]
    lines = [
        f"questions   {report['questions']} ({report['split']})",
        f"index       {index['notes']} notes, {index['chunks']} chunks",
        "",
    ]
    if "best" in report and "lead_weight" in report["best"][0]:
        lines.append("lead  second  length   tune hit@5/MRR   test hit@5/MRR")
        for tag, rows in (("defaults", report["defaults"]), ("best", report["best"])):
            lines.append(f"-- {tag}")
            for r in rows:
                lines.append(
                    f"{r['lead_weight']:>4g}  {r['second_weight']:>6g}  {r['length_prior']:>6g}"
                    f"   {r['tune_hit@5']:.3f}/{r['tune_mrr@10']:.3f}"
                    f"      {r['test_hit@5']:.3f}/{r['test_mrr@10']:.3f}"
                )
        return "\n".join(lines)
    if "best" in report:
        beir = any("tune_ndcg@10" in r for r in report["best"])
        head = f"{'columns':<12} {'k':>4} {'cand':>5} {'vec':>5}   tune hit@5/MRR"
        head += "  nDCG" if beir else ""
        lines.append(head + "    test hit@5/MRR" + ("  nDCG" if beir else "") + "  objective")
        for tag, rows in (("defaults", report["defaults"]), ("best", report["best"])):
            lines.append(f"-- {tag}")
            for r in rows:
                cols = ",".join(f"{c:g}" for c in r["columns"])
                line = f"{cols:<12} {r['rrf_k']:>4} {r['candidates']:>5} {r['vector_weight']:>5g}"
                for half in ("tune", "test"):
                    line += f"   {r[f'{half}_hit@5']:.3f}/{r[f'{half}_mrr@10']:.3f}"
                    if beir:
                        line += f" {r[f'{half}_ndcg@10']:.3f}"
                lines.append(line + f"   {r['objective']:.4f}")
        return "\n".join(lines)
    lines.append(f"{'mode':<8} {'hit@5':>6} {'MRR@10':>7} {'p50 ms':>7}")
    for mode, m in report["modes"].items():
        lines.append(
            f"{mode:<8} {m['hit@5']:>6.3f} {m['mrr@10']:>7.3f} {m.get('latency_p50_ms', 0):>7.1f}"
        )
    for mode, misses in report["misses"].items():
        if misses:
            lines += ["", f"{mode}: not in the top 5"]
            for miss in misses:
                lines.append(
                    f"  {miss['id']:>3} rank {miss['rank'] or '>10':>3}  {miss['question']}"
                    f"  -> {', '.join(miss['top'])}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
