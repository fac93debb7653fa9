"""Related notes: the notes nearest one note (or a passage of it), by meaning and by words.

Only what is stored is used: nothing is embedded, so an answer costs one Chroma query, one BM25
query and some arithmetic over stored vectors, and it is as fresh as the index (a saved note is
related by its new text once its vectors are in).

Candidates come from Chroma: the nearest chunks to (at most `MAX_QUERY_CHUNKS` of) the note's
chunks and to their mean, the `CANDIDATES` notes with the nearest. Each is then scored exactly
from both notes' stored vectors, three ways:
- **coverage**: how much of each note the other covers: the mean, over one note's passages, of
  its best match in the other, taken both ways and averaged (one way, from the asked passages,
  for a line range). Two notes on one subject cover each other; a shared footer or quote does
  not make them related.
- **passages**: the best pair of passages. A short note and one passage of a long note find
  what they are about.
- **centroid**: the other note's passage nearest the mean of this one's. A long note's overall
  subject, which no single passage states.

A fourth way is by **words**: the note's most distinctive words (tf-idf over the words index)
as one BM25 query; another note scores by its best passage. Names and terms of art, which two
notes on one subject share and a small model's vectors blur.

`fused` (the default) fuses coverage and words by rank (RRF, each one's top `FUSED_DEPTH`),
as search fuses its retrievers; `how` picks one way alone. bench/quality/related_eval.py measures
each against the vault's own links (docs/benchmarks.md). A result's `score` is what ranks it: the
fused score as a share of the best there is (1.0: first both ways), or the one way's own.

Each result carries the pair of passages that ties the two notes: the most similar pair,
computed exactly, among the passages that are not boilerplate. A passage is boilerplate when
it recurs in many of the notes looked at, by its words once links, URLs and numbers are set
aside (a footer with the note's own address in it) or by a vector all but the same (a template
filled in): shared by every note, it says nothing about why two of them belong together.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from vaultd.answers import Passage, RelatedNote
from vaultd.errors import QueryError, VectorsPendingError
from vaultd.hints import suggest
from vaultd.index.links import resolve_links
from vaultd.index.ranking import rrf
from vaultd.query import HOWS, STOP_WORDS, How, is_unspaced
from vaultd.records import StoredChunk
from vaultd.storage.manifest import Manifest
from vaultd.storage.vectors import VectorStore

#: Candidate chunks asked of Chroma per query vector (or k): enough for tens of distinct notes.
DEPTH = 40
#: A long note queries with at most this many of its chunks (evenly spaced): the answer's
#: time stays bounded, and neighbouring chunks of one note find the same notes anyway.
MAX_QUERY_CHUNKS = 48
#: Notes scored exactly from their vectors: the nearest by their best chunk.
CANDIDATES = 60
#: RRF's k for fusing the rankings (search's default), and each ranking's weight.
RRF_K = 60
FUSED_WEIGHTS = {"coverage": 1.0, "words": 1.0}
#: The fused score of a note first in every ranking: scores are shown as a share of it.
FUSED_BEST = sum(FUSED_WEIGHTS.values()) / (RRF_K + 1)
#: Each ranking is fused from its top this many only (or k, when more are asked for):
#: deeper, notes halfway down both lists outrank the top of either, and where one way is weak
#: (the vectors of a note that is a list of links) its tail is noise that outvotes the other's
#: best (docs/benchmarks.md).
FUSED_DEPTH = 15
#: The words ranking asks with this many of the note's most distinctive words...
QUERY_WORDS = 16
#: ...none of them in more than this share of the chunks...
WORD_SHARE = 0.2
#: ...and looks at this many chunks.
WORD_DEPTH = 200
_WORDS = re.compile(r"[^\W\d_]{3,}")
#: A passage in this many of the notes looked at (this one included) is boilerplate...
COMMON_NOTES = 4
#: ...by its words, links' targets, URLs, HTML tags and numbers aside (one pass: what is
#: set aside matches whole, without a group)...
_SHAPE = re.compile(r"\]\([^)]*\)|<[^>]*>|[a-z][a-z0-9+.-]*://\S+|([^\W\d_]+)")
#: ...or by its vector: two passages this close say the same thing in the same words.
SAME_PASSAGE = 0.97
#: The notes looked at for that: the results and the nearest candidates, this many.
PEERS = 20


def _passage(stored: StoredChunk) -> Passage:
    chunk = stored.chunk
    return Passage(chunk.start_line, chunk.end_line, chunk.section, chunk.text)


def checked_how(how: str) -> How:
    """`how` as given by a client, checked (QueryError names the choices)."""
    for choice in HOWS:
        if how == choice:
            return choice
    raise QueryError(f"how must be one of {', '.join(HOWS)}, not {how!r}")


def linked_paths(manifest: Manifest, path: str, row: dict[str, Any] | None = None) -> set[str]:
    """The notes `path` links to (resolved as Obsidian does) and those linking to it; `row`
    is its manifest row, when read already."""
    row = (manifest.notes.row(path) or {}) if row is None else row
    targets = [str(link.get("target", "")) for link in row.get("links", [])]
    out = set(resolve_links(manifest, path, targets))
    out.update(manifest.links.backlinks(path, row.get("aliases", [])))
    out.discard(path)
    return {p for p in out if p}


def _shape(text: str) -> str:
    """A passage's words, without what differs between copies of one footer or template
    (links' targets, URLs, numbers); "" when nothing is left."""
    return " ".join(word for word in _SHAPE.findall(text.lower()) if word)


def _words(text: str) -> list[str]:
    """The words the words ranking asks with: of 3 letters or more, lower-cased, not stop
    words nor unspaced-script runs (the pairs index's)."""
    return [
        w
        for w in (m.lower() for m in _WORDS.findall(text))
        if w not in STOP_WORDS and not is_unspaced(w)
    ]


def _common_shapes(notes: Iterable[Iterable[str]], shapes: Mapping[str, str]) -> set[str]:
    """The shapes held by at least `COMMON_NOTES` of the `notes` (each its chunks' ids),
    `shapes` being each chunk's (`_shape`)."""
    held: dict[str, int] = {}
    for ids in notes:
        for shape in {shapes[i] for i in ids if i in shapes} - {""}:
            held[shape] = held.get(shape, 0) + 1
    return {shape for shape, count in held.items() if count >= COMMON_NOTES}


class _Scores:
    """Exact scores of other notes against this note's passages (`mine`, one row each)."""

    def __init__(self, mine: np.ndarray, one_way: bool) -> None:
        self.mine = mine
        self.one_way = one_way
        centroid = mine.mean(axis=0)
        self.centroid = centroid / (np.linalg.norm(centroid) or 1.0)

    def of(self, theirs: np.ndarray) -> dict[str, float]:
        pairs = self.mine @ theirs.T
        covered = float(pairs.max(axis=1).mean())
        if not self.one_way:
            covered = (covered + float(pairs.max(axis=0).mean())) / 2
        return {
            "coverage": covered,
            "passages": float(pairs.max()),
            "centroid": float((theirs @ self.centroid).max()),
        }


class RelatedNotes:
    """Related notes over one open index (the manifest's vectors and words, the store's
    neighbours)."""

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
        note = chunks = self.manifest.notes.chunks_of(path)
        if not chunks:
            raise QueryError(f"{path} is not an indexed note (see {suggest('status')})")
        if lines is not None:
            first, last = lines
            chunks = [c for c in note if c.chunk.end_line >= first and c.chunk.start_line <= last]
            if not chunks:
                raise QueryError(f"{path} has no indexed passage in lines {first}-{last}")
        stored = self.manifest.vectors.get(self.model_id, {c.chunk.hash for c in chunks})
        mine = [c for c in chunks if c.chunk.hash in stored]
        if not mine:
            raise VectorsPendingError(path)
        matrix = np.vstack([stored[c.chunk.hash] for c in mine])
        row = self.manifest.notes.row(path) or {}
        linked = linked_paths(self.manifest, path, row)
        keep = None if allowed is None else set(allowed)

        def wanted(other: str) -> bool:
            if other == path or (exclude_linked and other in linked):
                return False
            return keep is None or other in keep

        scores = _Scores(matrix, one_way=lines is not None)
        vectors: dict[str, tuple[list[str], np.ndarray]] = {}
        ranked: dict[str, list[tuple[str, float]]] = {}
        found: list[str] = []
        if how != "words":
            found = self._candidates(scores, wanted, max(DEPTH, k), max(CANDIDATES, k))
            vectors = self.manifest.vectors.of_notes(self.model_id, found)
            exact = {other: scores.of(theirs) for other, (_, theirs) in vectors.items()}
            way = "coverage" if how == "fused" else how
            ranked[way] = sorted(
                ((other, s[way]) for other, s in exact.items()), key=lambda i: (-i[1], i[0])
            )
        if how in ("fused", "words"):
            aliases = [str(a) for a in row.get("aliases", [])]
            ranked["words"] = self._by_words(mine, note, aliases, wanted, allowed)
        if len(ranked) > 1:
            depth = max(FUSED_DEPTH, k)
            fused = rrf({way: r[:depth] for way, r in ranked.items()}, RRF_K, FUSED_WEIGHTS)
            fused = [(other, score / FUSED_BEST) for other, score in fused]
        else:
            fused = next(iter(ranked.values()))
        top = fused[:k]
        # The notes whose passages tell boilerplate: the nearest candidates (by words alone,
        # the best by words) and the results.
        nearest = found or [other for other, _ in fused]
        peers = list(dict.fromkeys([*nearest[:PEERS], *(other for other, _ in top)]))
        missing = [other for other in peers if other not in vectors]
        if missing:
            vectors.update(self.manifest.vectors.of_notes(self.model_id, missing))
        return self._results(path, top, mine, matrix, vectors, peers, linked)

    def _candidates(
        self, scores: _Scores, wanted: Callable[[str], bool], depth: int, limit: int
    ) -> list[str]:
        """The notes with the chunks nearest (`depth` for each) this note's passages and their
        mean, nearest first, at most `limit`."""
        mine = scores.mine
        count = min(len(mine), MAX_QUERY_CHUNKS)
        rows = np.unique(np.linspace(0, len(mine) - 1, count).round().astype(int))
        found = self.store.query_many(np.vstack([mine[rows], scores.centroid]), depth)
        return [other for other, _ in self._best_by_note(found, wanted)[:limit]]

    def _by_words(
        self,
        mine: Sequence[StoredChunk],
        note: Sequence[StoredChunk],
        aliases: Sequence[str],
        wanted: Callable[[str], bool],
        allowed: Sequence[str] | None,
    ) -> list[tuple[str, float]]:
        """Notes ranked by their best passage's BM25 for the most distinctive words of `mine`
        (passages of `note`, which has these `aliases`)."""
        passages = [_words(c.chunk.text) for c in mine]
        held = [_words(" ".join((c.title, *aliases, c.chunk.section, c.chunk.text))) for c in note]
        terms = self.manifest.keyword.distinctive_words(passages, held, QUERY_WORDS, WORD_SHARE)
        if not terms:
            return []
        match = " OR ".join(f'"{t}"' for t in terms)
        return self._best_by_note([self.manifest.keyword.bm25(match, WORD_DEPTH, allowed)], wanted)

    def _best_by_note(
        self, found: Sequence[Sequence[tuple[str, float]]], wanted: Callable[[str], bool]
    ) -> list[tuple[str, float]]:
        """Notes ranked by their best chunk's score over every query's hits."""
        ids = {chunk_id for hits in found for chunk_id, _ in hits}
        paths = self.manifest.notes.paths_of_chunks(sorted(ids))
        best: dict[str, float] = {}
        for hits in found:
            for chunk_id, score in hits:
                other = paths.get(chunk_id)
                if other is not None and wanted(other) and score > best.get(other, -2.0):
                    best[other] = score
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))

    def _results(
        self,
        path: str,
        top: Sequence[tuple[str, float]],
        mine: list[StoredChunk],
        matrix: np.ndarray,
        vectors: dict[str, tuple[list[str], np.ndarray]],
        peers: Sequence[str],
        linked: set[str],
    ) -> list[RelatedNote]:
        """The results, each with the best pair of passages that are not boilerplate (as
        told by the `peers`' passages)."""
        looked_at = [vectors[other] for other in peers if other in vectors]
        texts = self.manifest.notes.chunks_by_id([i for ids, _ in looked_at for i in ids])
        shapes = {
            i: _shape(c.chunk.text) for i, c in [*texts.items(), *((c.chunk.id, c) for c in mine)]
        }
        common = _common_shapes(
            [[c.chunk.id for c in mine], *(ids for ids, _ in looked_at)], shapes
        )
        # My passages all but the same as a passage of enough other notes.
        alike = np.zeros(len(mine), dtype=int)
        for _, theirs in looked_at:
            alike += (matrix @ theirs.T).max(axis=1) >= SAME_PASSAGE
        boiler = (alike + 1 >= COMMON_NOTES) | np.array(
            [shapes[c.chunk.id] in common for c in mine]
        )
        pairs: dict[str, tuple[float, StoredChunk, str]] = {}
        for other, _ in top:
            if other in vectors:
                ids, theirs = vectors[other]
                products = matrix @ theirs.T
                theirs_boiler = np.array([shapes.get(i, "") in common for i in ids], dtype=bool) | (
                    products[boiler].max(axis=0, initial=-2.0) >= SAME_PASSAGE
                )
                distinct = np.where(boiler[:, None] | theirs_boiler[None, :], -np.inf, products)
                pick = distinct if np.isfinite(distinct).any() else products
                i, j = np.unravel_index(int(np.argmax(pick)), pick.shape)
                pairs[other] = (float(products[i, j]), mine[int(i)], ids[int(j)])
        unread = [target for _, _, target in pairs.values() if target not in texts]
        targets = {**texts, **(self.manifest.notes.chunks_by_id(unread) if unread else {})}
        out = []
        for other, score in top:
            similarity, source, target_id = pairs.get(other, (-2.0, mine[0], ""))
            target = targets.get(target_id)
            if target is None:
                # No vector of it (it was being indexed) or gone since: its first passage.
                first = self.manifest.notes.chunks_of(other)
                if not first:
                    continue
                target = first[0]
            out.append(
                RelatedNote(
                    path=other,
                    title=target.title,
                    score=round(score, 6),
                    similarity=round(similarity, 6),
                    linked=other in linked,
                    source=_passage(source),
                    target=_passage(target),
                )
            )
        return out


__all__ = ["HOWS", "How", "RelatedNotes", "checked_how", "linked_paths"]
