"""Keyword search over the chunks: BM25 ranking in the manifest's FTS5 indexes, a substring
scan for terms too short for them, and the words index's vocabulary.

The indexes themselves (tables, tokenizers, triggers) are the schema's (`schema`), kept in
step with the chunks by triggers; `KeywordController`, the manifest's `keyword`, only reads
them.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from vaultd.storage.connection import Connection
from vaultd.storage.schema import WORDS_TOKENIZER
from vaultd.storage.vocabulary import Vocabulary

KeywordIndex = Literal["words", "pairs"]
_KEYWORD_TABLES: dict[str, str] = {"words": "chunks_fts", "pairs": "chunks_pairs"}
#: BM25 column weights for title, aliases, heading path and text (see docs/search.md).
KEYWORD_WEIGHTS: tuple[float, float, float, float] = (4.0, 4.0, 2.0, 1.0)


def stems(words: Iterable[str]) -> dict[str, str]:
    """Each word's term in the words index (its stem, lower-cased, accents folded), made by the
    index's own tokenizer so that the two always agree; a word it drops is left out.

    An in-memory FTS5 table of one row per word, read back through its vocabulary: SQLite
    offers no other way to run a tokenizer.
    """
    distinct = list(dict.fromkeys(words))
    if not distinct:
        return {}
    db = sqlite3.connect(":memory:")
    try:
        db.execute(f"CREATE VIRTUAL TABLE w USING fts5(word, tokenize='{WORDS_TOKENIZER}')")
        db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(w, instance)")
        db.executemany("INSERT INTO w(rowid, word) VALUES (?, ?)", enumerate(distinct))
        # A word of several tokens ("e-mail") keeps its first.
        out: dict[str, str] = {}
        for row, term in db.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
            out.setdefault(distinct[row], term)
        return out
    finally:
        db.close()


class KeywordController:
    """Search by words: BM25 and substring matches over the chunks, their highlights, the
    words index's vocabulary and the words that tell a text from the rest of it."""

    #: Terms whose chunk counts are kept at most (a few MB).
    TERMS_KEPT = 100_000

    def __init__(self, connection: Connection) -> None:
        self._query = connection.query
        self._connection = connection
        #: As of a count of writes: the words index's chunk counts of the terms looked up and
        #: its chunks in all.
        self._terms: tuple[int, dict[str, int], int] = (-1, {}, 0)

    def bm25(
        self,
        match: str,
        limit: int,
        paths: Sequence[str] | None = None,
        *,
        weights: Sequence[float] = KEYWORD_WEIGHTS,
        index: KeywordIndex = "words",
        require: str = "",
    ) -> list[tuple[str, float]]:
        """(chunk id, BM25 score; higher is better) for an FTS5 MATCH expression.

        `index` is "words" (stemmed) or "pairs" (unspaced scripts' pairs of characters, see
        `vaultd.query.cjk_terms`); `weights` are the BM25
        column weights for title, aliases, heading path and text; `paths` restricts the notes;
        `require` is a second MATCH expression every row must also satisfy (BM25 stays that of
        `match`).
        """
        table = _KEYWORD_TABLES[index]
        ranking = f"-bm25({table}, {', '.join(str(float(w)) for w in weights)})"
        also = (
            f" AND {table}.rowid IN (SELECT rowid FROM {table} WHERE {table} MATCH ?)"
            if require
            else ""
        )
        extra: list[Any] = [require] if require else []
        if paths is None:
            # Rank inside FTS5 first and join only the winners: most of a query's cost
            # otherwise goes into joining every matching chunk.
            sql = (
                f"SELECT c.id, f.score FROM (SELECT rowid, {ranking} AS score FROM {table} "
                f"WHERE {table} MATCH ?{also} ORDER BY score DESC LIMIT ?) f "
                "JOIN chunks c ON c.n = f.rowid ORDER BY f.score DESC, c.path, c.start_line"
            )
            return [(r[0], float(r[1])) for r in self._query(sql, (match, *extra, limit))]
        if not paths:
            return []
        sql = (
            f"SELECT c.id, {ranking} AS score FROM {table} "
            f"JOIN chunks c ON c.n = {table}.rowid WHERE {table} MATCH ?{also} "
            "AND c.path IN (SELECT value FROM json_each(?)) "
            "ORDER BY score DESC, c.path, c.start_line LIMIT ?"
        )
        params = (match, *extra, json.dumps(list(paths), ensure_ascii=False), limit)
        return [(r[0], float(r[1])) for r in self._query(sql, params)]

    def substring(
        self,
        terms: Sequence[str],
        limit: int,
        paths: Sequence[str] | None = None,
        *,
        weights: Sequence[float] = KEYWORD_WEIGHTS,
    ) -> list[tuple[str, float]]:
        """Chunks containing any of `terms` as a substring (for lone unspaced-script characters,
        which no pair holds).

        A scan of the chunk texts, ranked by the distinct terms a chunk contains, then by its
        occurrences (weighted by column like BM25), then by path and line. The score is
        `terms matched + occurrences / (occurrences + 1)`, which orders the same way.
        """
        terms = [t.casefold() for t in dict.fromkeys(terms) if t]
        if not terms or (paths is not None and not paths):
            return []
        haystack = "lower(title || ' ' || aliases || ' ' || section || ' ' || text)"
        sql = (
            "SELECT id, path, start_line, title, aliases, section, text FROM chunks WHERE ("
            + " OR ".join(f"instr({haystack}, ?) > 0" for _ in terms)
            + ")"
        )
        params: list[Any] = [t.lower() for t in terms]
        if paths is not None:
            sql += " AND path IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(paths), ensure_ascii=False))
        scored: list[tuple[float, str, int, str]] = []
        for chunk_id, path, start_line, *fields in self._query(sql, params):
            folded = [f.casefold() for f in fields]
            matched = 0
            occurrences = 0.0
            for term in terms:
                counts = [f.count(term) for f in folded]
                if any(counts):
                    matched += 1
                    occurrences += sum(w * n for w, n in zip(weights, counts, strict=True))
            if matched:
                score = matched + occurrences / (occurrences + 1)
                scored.append((-score, path, start_line, chunk_id))
        scored.sort()
        return [(chunk_id, -neg) for neg, _, _, chunk_id in scored[:limit]]

    def marked(self, match: str, chunk_ids: Sequence[str], start: str, end: str) -> dict[str, str]:
        """Each chunk's text with the tokens the words index matches for `match` (stemmed, and
        phrases as phrases) between `start` and `end`; chunks it does not match are left out."""
        if not chunk_ids or not match:
            return {}
        # The rowids named for FTS5 itself: it then looks at those rows alone, where a filter on
        # the join would have it read every row the words match (a search runs this every time).
        sql = (
            "SELECT c.id, highlight(chunks_fts, 3, ?, ?) FROM chunks_fts "
            "JOIN chunks c ON c.n = chunks_fts.rowid WHERE chunks_fts MATCH ? "
            "AND chunks_fts.rowid IN "
            "(SELECT n FROM chunks WHERE id IN (SELECT value FROM json_each(?)))"
        )
        rows = self._query(sql, (start, end, match, json.dumps(list(chunk_ids))))
        return {r[0]: r[1] for r in rows}

    def term_chunks(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each of these terms of the words index (terms none holds are left
        out). A lookup walks the term's list of chunks, so a common term costs more."""
        out: dict[str, int] = {}
        for start in range(0, len(terms), 500):
            batch = list(terms[start : start + 500])
            marks = ",".join("?" * len(batch))
            out.update(
                self._query(f"SELECT term, doc FROM chunks_vocab WHERE term IN ({marks})", batch)
            )
        return out

    def distinctive_words(
        self,
        passages: Sequence[Sequence[str]],
        held: Sequence[Sequence[str]],
        limit: int,
        max_share: float,
        floor: int = 100,
    ) -> list[str]:
        """The `limit` words of a text that best tell it from the rest of the words index, best
        first. `passages` are the words of each of its chunks' text, as they occur; `held` the
        words each chunk of its note holds in any column (title, aliases, heading, text).

        By tf-idf over the index's terms, one word for each term (its commonest form). A term no
        chunk of another note holds is left out (it finds nothing but the note), and so are
        terms in more than `max_share` of the chunks (and more than `floor`): they say little,
        and their long lists of chunks are what makes a BM25 query slow on a big vault.
        """
        forms = Counter(w for words in passages for w in words)
        stem_of = stems([*forms, *(w for words in held for w in words)])
        tf: Counter[str] = Counter()
        form: dict[str, str] = {}
        for word, count in forms.most_common():
            term = stem_of.get(word)
            if term is not None:
                tf[term] += count
                form.setdefault(term, word)
        if not tf:
            return []
        # The note's own chunks holding each term: the index counts them too.
        own: Counter[str] = Counter(
            term for words in held for term in {stem_of[w] for w in words if w in stem_of}
        )
        df, total = self._chunks_with(sorted(tf))
        most = max(max_share * total, floor)
        scored = [
            (tf[term] * math.log(total / n), term)
            for term, n in df.items()
            if own[term] < n <= most
        ]
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [form[term] for _, term in scored[:limit]]

    def _chunks_with(self, terms: Sequence[str]) -> tuple[dict[str, int], int]:
        """The chunks holding each term of the words index, and the chunks in all.

        Kept until the next write, and only terms looked up already: every related-notes
        request asks for a note's terms, and a common one costs a walk of its list of chunks.
        """
        # Counted before the reads: a write meanwhile makes the next call read.
        writes = self._connection.writes
        seen, counts, total = self._terms
        if seen != writes or len(counts) > self.TERMS_KEPT:
            counts, total = {}, self._query("SELECT count(*) FROM chunks", ())[0][0]
        new = [t for t in terms if t not in counts]
        if new:
            found = self.term_chunks(new)
            # In place: only lookups and len() ever read it, so other threads may share it.
            counts.update((t, found.get(t, 0)) for t in new)
        if self._terms[0] <= writes:  # a slower, older call does not undo a newer one
            self._terms = (writes, counts, total)
        return {t: counts[t] for t in terms if counts[t]}, total

    def vocabulary(self) -> Vocabulary:
        """The words index's terms with the chunks holding each, for typo candidates."""
        rows = int(self._query("SELECT count(*) FROM chunks", ())[0][0])
        return Vocabulary.of(dict(self._query("SELECT term, doc FROM chunks_vocab", ())), rows)

    def chunks_holding(
        self, match: str, limit: int, paths: Sequence[str] | None = None
    ) -> list[tuple[str, str]]:
        """(chunk id, path) of up to `limit` chunks the words index finds for `match` (in
        `paths` when given), unranked, in the index's order."""
        sql = (
            "SELECT c.id, c.path FROM chunks_fts JOIN chunks c ON c.n = chunks_fts.rowid "
            "WHERE chunks_fts MATCH ?"
        )
        params: list[object] = [match]
        if paths is not None:
            sql += " AND c.path IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(paths), ensure_ascii=False))
        return [(r[0], r[1]) for r in self._query(sql + " LIMIT ?", (*params, limit))]
