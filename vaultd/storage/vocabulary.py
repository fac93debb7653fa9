"""What a query's words may mean besides themselves: the words index's vocabulary, for typo
candidates, and the notes' names (title, aliases, file name, path), folded.

Both are snapshots read from the manifest (`manifest.keyword.vocabulary()`,
`manifest.notes.names()`), kept in memory and read again when the manifest has changed (the
caller decides when: `vaultd.index.known`). A snapshot of obsidian-hub's ~90,000 terms is read in a
fraction of a second, so re-reading it whole is cheaper to keep right than following every
chunk written.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rapidfuzz import process
from rapidfuzz.distance import OSA

_WORD = re.compile(r"\w+")
#: The vocabulary's terms made of letters only: numbers, ids and hashes are never corrected to.
_LETTERS = re.compile(r"[^\W\d_]+")


def fold(text: str) -> str:
    """Case and accents folded, every run of non-word characters one space, trimmed: how names
    and queries are compared (`Canvas - Send to back.md` and `canvas send to back` agree)."""
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text.casefold())
        text = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(_WORD.findall(text.lower()))


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The words index's terms (stems) with the chunks holding each, grouped by length and
    first letter, and by length and last letter, so that a word's candidates are looked for
    only among the few thousand terms that can be near it."""

    chunks: dict[str, int] = field(default_factory=dict)
    #: (length, first letter) and (length, last letter): the terms made of letters only.
    by_first: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    by_last: dict[tuple[int, str], list[str]] = field(default_factory=dict)
    #: The chunks in all (for a term's share of them).
    rows: int = 0

    @classmethod
    def of(cls, chunks: dict[str, int], rows: int = 0) -> Vocabulary:
        by_first: defaultdict[tuple[int, str], list[str]] = defaultdict(list)
        by_last: defaultdict[tuple[int, str], list[str]] = defaultdict(list)
        for term in chunks:
            if _LETTERS.fullmatch(term):
                by_first[len(term), term[0]].append(term)
                by_last[len(term), term[-1]].append(term)
        return cls(chunks, dict(by_first), dict(by_last), rows)

    def __len__(self) -> int:
        return len(self.chunks)

    def neighbours(self, term: str, edits: int, limit: int = 8) -> list[tuple[str, int]]:
        """(term, edits) of the vocabulary within `edits` of `term` (a swap of two neighbouring
        letters is one edit: the optimal string alignment distance), fewest edits first, then
        the terms more chunks hold; never `term` itself.

        One edit of a word of three letters or more leaves its first letter or its last, so
        the terms sharing neither are never compared: with one edit nothing is missed, with
        two only a word mistyped at both ends. rapidfuzz's OSA scan is bit-parallel C++ with
        an early exit at the cutoff, about a microsecond a term here.
        """
        if not term:
            return []
        found: dict[str, int] = {}
        for length in range(len(term) - edits, len(term) + edits + 1):
            for choices in (
                self.by_first.get((length, term[0])),
                self.by_last.get((length, term[-1])),
            ):
                if not choices:
                    continue
                for candidate, distance, _ in process.extract(
                    term, choices, scorer=OSA.distance, score_cutoff=edits, limit=None
                ):
                    if candidate != term:
                        found[candidate] = int(distance)
        ranked = sorted(found.items(), key=lambda item: (item[1], -self.chunks[item[0]], item[0]))
        return ranked[:limit]


@dataclass(frozen=True, slots=True)
class Names:
    """Every note's names, folded: its title, aliases, file name and path (without `.md`)."""

    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str, str]]) -> Names:
        """From each note's (path, title, aliases as JSON)."""
        paths: defaultdict[str, list[str]] = defaultdict(list)
        for path, title, aliases in rows:
            stem = path[:-3] if path.lower().endswith(".md") else path
            names = [title, stem.rsplit("/", 1)[-1], stem, *_aliases(aliases)]
            for name in {fold(n) for n in names if n}:
                if name:
                    paths[name].append(path)
        return cls({name: tuple(sorted(found)) for name, found in paths.items()})

    def notes_named(self, query: str) -> tuple[str, ...]:
        """The notes whose title, alias, file name or path is `query`, folded."""
        return self.paths.get(fold(query), ())


def _aliases(raw: str) -> Sequence[str]:
    try:
        value = json.loads(raw or "[]")
    except ValueError:
        return ()
    return [str(a) for a in value] if isinstance(value, list) else ()
