"""Related notes: the notes nearest one note (or a passage of it) by meaning.

Only stored vectors are used: nothing is embedded, so an answer costs a few Chroma queries and
is as fresh as the index (a saved note is related by its new text once its vectors are in).

A note is seen two ways by meaning, and the two rankings are fused by rank (RRF), as search
fuses its retrievers; a third way, by its words, is there to compare (and costs too much on a
big vault to be fused by default: docs/benchmarks.md):
- **by its passages**: each chunk's nearest chunks of other notes; another note scores by its
  best pair. A short note and one passage of a long note both find what they are about.
- **by its centroid**: the mean of its chunk vectors; another note scores by its chunk nearest
  that mean. A long note's overall subject, which no single passage states.
- **by its words**: its most frequent words (not stop words) as one BM25 query of the words
  index; another note scores by its best passage. Names and terms of art, which two notes on
  one subject share and a small model's vectors blur.

`how` picks one alone; bench/related_eval.py measures each against the link graph
(docs/benchmarks.md). Each result carries the pair of passages that ties the two notes (the
most similar chunk pair, computed exactly from both notes' stored vectors).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from vaultd.errors import QueryError, VectorsPendingError
from vaultd.index.links import LinkResolver
from vaultd.index.search import rrf
from vaultd.query import STOP_WORDS, is_unspaced
from vaultd.storage.manifest import Manifest, StoredChunk
from vaultd.storage.vectors import VectorStore

How = Literal["fused", "passages", "centroid", "words"]
HOWS: tuple[How, ...] = ("fused", "passages", "centroid", "words")

#: Candidate chunks asked of Chroma per query vector: enough for tens of distinct notes.
DEPTH = 40
#: A long note queries with at most this many of its chunks (evenly spaced): the answer's
#: time stays bounded, and neighbouring chunks of one note find the same notes anyway.
MAX_QUERY_CHUNKS = 48
#: RRF's k for fusing the rankings (search's default).
RRF_K = 60
#: The words ranking asks with a note's most frequent words, this many, of 3 letters or more.
QUERY_WORDS = 64
#: Chunks the words ranking looks at.
WORD_DEPTH = 400
_WORDS = re.compile(r"[^\W\d_]{3,}")


@dataclass(frozen=True, slots=True)
class Passage:
    start_line: int
    end_line: int
    section: str
    text: str

    @classmethod
    def of(cls, chunk: StoredChunk) -> Passage:
        return cls(chunk.start_line, chunk.end_line, chunk.section, chunk.text)

    def as_json(self) -> dict[str, Any]:
        return {
            "start_line": self.start_line,
            "end_line": self.end_line,
            "section": self.section,
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class RelatedNote:
    path: str
    title: str
    #: The fused score (RRF), higher is nearer; `similarity` is the best pair's cosine.
    score: float
    similarity: float
    #: Whether the two notes are linked already (either way).
    linked: bool
    #: The pair of passages that ties them: this note's (`source`) and the related one's.
    source: Passage
    target: Passage

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "title": self.title,
            "score": round(self.score, 6),
            "similarity": round(self.similarity, 6),
            "linked": self.linked,
            "source": self.source.as_json(),
            "target": self.target.as_json(),
        }


def checked_how(how: str) -> How:
    """`how` as given by a client, checked (QueryError names the choices)."""
    for choice in HOWS:
        if how == choice:
            return choice
    raise QueryError(f"how must be one of {', '.join(HOWS)}, not {how!r}")


def linked_paths(manifest: Manifest, path: str) -> set[str]:
    """The notes `path` links to (resolved as Obsidian does) and those linking to it."""
    row = manifest.note_row(path) or {}
    resolver = LinkResolver(manifest.note_paths())
    out = {resolver.resolve(str(link.get("target", "")), path) for link in row.get("links", [])}
    out.update(manifest.backlinks(path, row.get("aliases", [])))
    out.discard(path)
    return {p for p in out if p}


class RelatedNotes:
    """Related notes over one open index (the manifest's vectors, the store's neighbours)."""

    def __init__(self, manifest: Manifest, store: VectorStore, model_id: str) -> None:
        self.manifest = manifest
        self.store = store
        self.model_id = model_id

    def related(
        self,
        path: str,
        k: int = 10,
        *,
        lines: tuple[int, int] | None = None,
        exclude_linked: bool = False,
        allowed: Sequence[str] | None = None,
        how: How = "fused",
    ) -> list[RelatedNote]:
        """The `k` notes nearest `path` (its chunks overlapping `lines`, when given), among
        `allowed` notes when given (the search filters' selection).

        Raises QueryError for a note that is not indexed or a range with no passage of it, and
        VectorsPendingError for a note whose vectors are not in yet.
        """
        chunks = self.manifest.chunks_of(path)
        if not chunks:
            raise QueryError(f"{path} is not an indexed note (see `vaultd status`)")
        if lines is not None:
            first, last = lines
            chunks = [c for c in chunks if c.end_line >= first and c.start_line <= last]
            if not chunks:
                raise QueryError(f"{path} has no indexed passage in lines {first}-{last}")
        stored = self.manifest.vectors(self.model_id, {c.hash for c in chunks})
        mine = [c for c in chunks if c.hash in stored]
        if not mine:
            raise VectorsPendingError(path)
        matrix = np.vstack([stored[c.hash] for c in mine])
        linked = linked_paths(self.manifest, path)
        keep = None if allowed is None else set(allowed)

        def wanted(other: str) -> bool:
            if other == path or (exclude_linked and other in linked):
                return False
            return keep is None or other in keep

        ranked: dict[str, list[tuple[str, float]]] = {}
        if how in ("fused", "passages"):
            count = min(len(mine), MAX_QUERY_CHUNKS)
            rows = np.unique(np.linspace(0, len(mine) - 1, count).round().astype(int))
            ranked["passages"] = self._best_by_note(
                self.store.query_many(matrix[rows], DEPTH), wanted
            )
        if how in ("fused", "centroid"):
            centroid = matrix.mean(axis=0)
            centroid /= np.linalg.norm(centroid) or 1.0
            ranked["centroid"] = self._best_by_note([self.store.query(centroid, DEPTH * 2)], wanted)
        if how == "words":
            ranked["words"] = self._by_words(mine, wanted, allowed)
        fused = rrf(ranked, RRF_K, {}) if len(ranked) > 1 else next(iter(ranked.values()))
        return [
            self._result(path, other, score, mine, matrix, linked) for other, score in fused[:k]
        ]

    def _by_words(
        self, mine: Sequence[StoredChunk], wanted: Any, allowed: Sequence[str] | None
    ) -> list[tuple[str, float]]:
        """Notes ranked by their best passage's BM25 for the note's most frequent words."""
        counts = Counter(
            w
            for c in mine
            for w in (m.lower() for m in _WORDS.findall(c.text))
            if w not in STOP_WORDS and not is_unspaced(w)
        )
        terms = [w for w, _ in counts.most_common(QUERY_WORDS)]
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        hits = self.manifest.keyword(match, WORD_DEPTH, allowed)
        return self._best_by_note([hits], wanted)

    def _best_by_note(
        self, found: Sequence[Sequence[tuple[str, float]]], wanted: Any
    ) -> list[tuple[str, float]]:
        """Notes ranked by their best chunk's similarity over every query's neighbours."""
        ids = {chunk_id for hits in found for chunk_id, _ in hits}
        paths = {i: c.path for i, c in self.manifest.chunks_by_id(sorted(ids)).items()}
        best: dict[str, float] = {}
        for hits in found:
            for chunk_id, similarity in hits:
                other = paths.get(chunk_id)
                if other is not None and wanted(other) and similarity > best.get(other, -2.0):
                    best[other] = similarity
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))

    def _result(
        self,
        path: str,
        other: str,
        score: float,
        mine: list[StoredChunk],
        matrix: np.ndarray,
        linked: set[str],
    ) -> RelatedNote:
        theirs = self.manifest.chunks_of(other)
        vectors = self.manifest.vectors(self.model_id, {c.hash for c in theirs})
        theirs = [c for c in theirs if c.hash in vectors]
        similarity, source, target = -2.0, mine[0], theirs[0] if theirs else mine[0]
        if theirs:
            pairs = matrix @ np.vstack([vectors[c.hash] for c in theirs]).T
            i, j = np.unravel_index(int(np.argmax(pairs)), pairs.shape)
            similarity, source, target = float(pairs[i, j]), mine[int(i)], theirs[int(j)]
        return RelatedNote(
            path=other,
            title=target.title,
            score=score,
            similarity=similarity,
            linked=other in linked,
            source=Passage.of(source),
            target=Passage.of(target),
        )


__all__ = ["HOWS", "How", "RelatedNote", "RelatedNotes", "checked_how", "linked_paths"]
