"""Corrections of real words: of the labelled queries whose every word the vault holds in some
form or the language knows, the share that typo correction nevertheless corrects (docs/search.md,
"Typos"; it must be 0), and the queries corrected in all.

    python bench/quality/corrections.py [--help-index /tmp/k53-help/vaultd.toml]

Run as a file, it measures the `vaultd` first on PYTHONPATH (so `PYTHONPATH=/tmp/base python
bench/quality/corrections.py` measures another checkout with the same rule). The sets:

- SciFact's 300 claims (/work/shared/bench/scifact) against a vocabulary of its corpus built by
  the words index's own tokenizer, one document a chunk (no embedding needed: corrections are
  made from the vocabulary alone);
- the help questions (bench/data/questions/obsidian-help-en.jsonl) and the known-item sets'
  phrase, name and word queries of the help vault against its index (`--help-index`, a config
  of an index of obsidian-help/en, as `bench.quality.known_items` leaves one).

Deterministic: the vocabulary and the rule decide; no ranking is involved.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))  # after PYTHONPATH: the checkout measured comes first

from vaultd.index import known  # noqa: E402
from vaultd.query import STOP_WORDS, check_query  # noqa: E402
from vaultd.storage.schema import WORDS_TOKENIZER  # noqa: E402
from vaultd.storage.vocabulary import Vocabulary  # noqa: E402

SCIFACT = Path("/work/shared/bench/scifact")
QUESTIONS = REPO / "bench" / "data" / "questions"


def _common() -> frozenset[str]:
    from spellchecker import SpellChecker

    return frozenset(w.lower() for w in SpellChecker(language="en").word_frequency.dictionary)


def corpus_vocabulary(texts: list[str]) -> Vocabulary:
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{WORDS_TOKENIZER}')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, row)")
    db.executemany("INSERT INTO t(text) VALUES (?)", [(t,) for t in texts])
    return Vocabulary.of(dict(db.execute("SELECT term, doc FROM v")), len(texts))


def measure(queries: list[str], vocabulary: Vocabulary, common: frozenset[str]) -> dict[str, Any]:
    known_all = corrected = known_corrected = 0
    examples: list[str] = []
    for query in queries:
        words = list(dict.fromkeys(check_query(query).words))
        stem_of = known.stems_of(words)
        corrections = known._corrections(words, stem_of, vocabulary)[0]

        def knows(word: str, stem_of: dict[str, str] = stem_of) -> bool:
            lower = word.lower()
            term = stem_of.get(word)
            return (
                lower in STOP_WORDS
                or lower in common
                or lower in vocabulary.chunks
                or (term is not None and vocabulary.chunks.get(term, 0) > 0)
                or term is None  # dropped by the tokenizer: nothing to correct
            )

        every = all(knows(w) for w in words)
        known_all += every
        corrected += bool(corrections)
        if every and corrections:
            known_corrected += 1
            if len(examples) < 8:
                examples.append(f"{query} -> {[c.word + '>' + c.term for c in corrections]}")
    return {
        "queries": len(queries),
        "all words known": known_all,
        "corrected": corrected,
        "known yet corrected": known_corrected,
        "share": round(known_corrected / known_all, 4) if known_all else 0.0,
        "examples": examples,
    }


def _rows(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--help-index", type=Path, help="config of an index of obsidian-help/en")
    args = parser.parse_args()
    common = _common()
    report: dict[str, Any] = {}
    claims = [row["text"] for row in _rows(SCIFACT / "queries.jsonl")]
    docs = _rows(SCIFACT / "corpus.jsonl")
    vocabulary = corpus_vocabulary([f"{d.get('title', '')}\n{d.get('text', '')}" for d in docs])
    report["scifact"] = measure(claims, vocabulary, common)
    if args.help_index:
        from vaultd.config import load_config
        from vaultd.index.open import open_index

        questions = [row["question"] for row in _rows(QUESTIONS / "obsidian-help-en.jsonl")]
        items = [
            row["query"]
            for half in ("tune", "heldout")
            for row in _rows(QUESTIONS / f"known-help-{half}.jsonl")
            if row["kind"] != "typo"
        ]
        with open_index(load_config(args.help_index, env={}), env={}) as index:
            help_vocabulary = index.searcher.lexicon.current()[0]
            report["help questions"] = measure(questions, help_vocabulary, common)
            report["help known items (no typo)"] = measure(items, help_vocabulary, common)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
