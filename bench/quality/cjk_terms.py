"""How to cut Chinese for the keyword index: trigrams, overlapping bigrams, or jieba's words.

    python -m bench.quality.cjk_terms [--vault DIR] [--questions FILE] [--split tune|test|all]
        [--json]

Each way is scored on the same chunks (vaultd's own parse and chunk of the vault) and the same
questions (`bench/data/questions/obsidian-help-zh.jsonl`), keyword search alone: an in-memory FTS5
index per way over the chunk's title, aliases, heading path and text (BM25 column weights
4, 4, 2, 1 as vaultd's), a query of the way's terms OR-ed (each unspaced run also as a phrase),
notes ranked by their best chunk; hit@5 and MRR@10. Latin-script words are indexed and asked
for the same way in all of them (stemmed unicode61), so only the cut of CJK text differs:

- `trigram`: FTS5's trigram tokenizer over the raw text (vaultd before; a run of one or two
  characters can only match by substring there, so it is left out here as in FTS5);
- `bigram`: each run of CJK characters as its overlapping pairs (a lone character as itself),
  as Lucene's CJK analyzer does; no dictionary;
- `jieba`: jieba 0.42.1's `cut_for_search` (words, and the shorter words inside long ones).

jieba is only needed for its column: `pip install jieba==0.42.1`.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.lib.paths import CORPORA, QUESTIONS
from bench.lib.results import add_record_option, record
from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.parse import parse_note
from vaultd.query import UNSPACED_RANGES

DEFAULT_VAULT = CORPORA / "obsidian-help" / "zh"
DEFAULT_QUESTIONS = QUESTIONS / "obsidian-help-zh.jsonl"
WEIGHTS = (4.0, 4.0, 2.0, 1.0)
_CLASS = "".join(f"{chr(a)}-{chr(b)}" for a, b in UNSPACED_RANGES)
RUN = re.compile(f"[{_CLASS}]+")


def bigrams(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def jieba_words(run: str) -> list[str]:
    import jieba

    return [w for w in jieba.cut_for_search(run) if w.strip()]


def terms_text(text: str, cut: Callable[[str], list[str]]) -> str:
    """The text with each CJK run replaced by its terms, space-separated."""
    return RUN.sub(lambda m: " " + " ".join(cut(m.group(0))) + " ", text)


def fts_quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def query_expr(question: str, way: str) -> str:
    parts: list[str] = []
    latin = RUN.sub(" ", question)
    parts += [fts_quote(w) for w in re.findall(r"\w+", latin)]
    for run in RUN.findall(question):
        if way == "trigram":
            if len(run) >= 3:
                parts.append(fts_quote(run))
                parts += [fts_quote(run[i : i + 3]) for i in range(len(run) - 2)]
        else:
            cut = bigrams if way == "bigram" else jieba_words
            terms = cut(run)
            if len(terms) > 1:
                parts.append(fts_quote(" ".join(terms)))  # the run as a phrase of its terms
            parts += [fts_quote(t) for t in terms]
    return " OR ".join(dict.fromkeys(parts))


def build(way: str, chunks: list[tuple[str, tuple[str, str, str, str]]]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    tokenize = "trigram" if way == "trigram" else "porter unicode61 remove_diacritics 2"
    db.execute(
        f"CREATE VIRTUAL TABLE t USING fts5(path UNINDEXED, title, aliases, section, text, "
        f"tokenize='{tokenize}')"
    )
    for path, columns in chunks:
        if way != "trigram":
            cut = bigrams if way == "bigram" else jieba_words
            columns = tuple(terms_text(c, cut) for c in columns)  # type: ignore[assignment]
        db.execute("INSERT INTO t VALUES (?, ?, ?, ?, ?)", (path, *columns))
    return db


def ranked_notes(db: sqlite3.Connection, expr: str) -> list[str]:
    if not expr:
        return []
    rows = db.execute(
        f"SELECT path, bm25(t, 0, {', '.join(map(str, WEIGHTS))}) AS s FROM t WHERE t MATCH ? "
        "ORDER BY s LIMIT 200",
        (expr,),
    ).fetchall()
    return list(dict.fromkeys(path for path, _ in rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT)
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS)
    parser.add_argument("--split", choices=("tune", "test", "all"), default="tune")
    parser.add_argument("--ways", default="trigram,bigram,jieba")
    parser.add_argument("--json", action="store_true")
    add_record_option(parser)
    args = parser.parse_args(argv)
    counter = TokenCounter.for_spec(default_spec())
    chunks: list[tuple[str, tuple[str, str, str, str]]] = []
    for file in sorted(args.vault.rglob("*.md")):
        path = file.relative_to(args.vault).as_posix()
        note = parse_note(path, file.read_bytes(), max_bytes=1 << 24)
        for c in chunk_note(note, counter, 256):
            columns = (note.title, "\n".join(note.aliases), " > ".join(c.headings), c.text)
            chunks.append((path, columns))
    questions = []
    for line in args.questions.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        odd = row["id"] % 2 == 1
        if args.split == "all" or (args.split == "tune") == odd:
            questions.append((row["question"], {row["path"], *row.get("also", [])}))
    report: dict[str, Any] = {"split": args.split, "questions": len(questions)}
    report["chunks"] = len(chunks)
    for way in args.ways.split(","):
        started = time.perf_counter()
        db = build(way, chunks)
        built = time.perf_counter() - started
        hits = rr = 0.0
        misses = []
        for question, answers in questions:
            notes = ranked_notes(db, query_expr(question, way))
            rank = next((i for i, p in enumerate(notes[:10], 1) if p in answers), None)
            hits += 1.0 if rank is not None and rank <= 5 else 0.0
            rr += 1.0 / rank if rank is not None else 0.0
            if rank is None or rank > 5:
                misses.append({"question": question, "rank": rank, "top": notes[:2]})
        n = max(1, len(questions))
        report[way] = {
            "hit@5": round(hits / n, 4),
            "mrr@10": round(rr / n, 4),
            "index_seconds": round(built, 2),
            "misses": misses,
        }
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=1))
    else:
        for way in args.ways.split(","):
            r = report[way]
            line = f"{way:8} hit@5 {r['hit@5']:.3f}  MRR@10 {r['mrr@10']:.3f}"
            print(f"{line}  ({r['index_seconds']} s to index)")
    ways = [(way, report[way]) for way in args.ways.split(",")]
    rows = [
        [way, f"{r['hit@5']:.3f}", f"{r['mrr@10']:.3f}", f"{r['index_seconds']} s"]
        for way, r in ways
    ]
    heads = [f"terms ({args.split}, {len(questions)} questions)", "hit@5", "MRR@10"]
    record(args.record, [*heads, "to index"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
