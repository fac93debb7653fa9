"""The read path: a query becomes ranked hits.

Hybrid by default: BM25 over vaultd's FTS5 index and cosine similarity from Chroma, fused by
reciprocal rank fusion (RRF), which needs no score calibration between the two retrievers.
Filters select notes first, then ranking runs inside them, so a filter never empties a page
that a larger top-k would have filled.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from vaultd.manifest import Manifest
from vaultd.model import Hit
from vaultd.pipeline.embed import Embedder
from vaultd.pipeline.store import VectorStore

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
#: RRF's constant; 60 is the value from Cormack et al. and the common default.
RRF_K = 60
#: Candidates each retriever contributes to the fusion.
CANDIDATES = 50
MAX_K = 100

_WORD = re.compile(r"\w+")
_PHRASE = re.compile(r'"([^"]+)"')


def fts_query(query: str) -> str:
    """A safe FTS5 MATCH expression: quoted phrases kept, every other word OR-ed."""
    parts: list[str] = []
    for phrase in _PHRASE.findall(query):
        words = _WORD.findall(phrase)
        if words:
            parts.append('"' + " ".join(words) + '"')
    rest = _PHRASE.sub(" ", query)
    parts.extend(f'"{w}"' for w in _WORD.findall(rest))
    return " OR ".join(parts)


class Searcher:
    def __init__(self, manifest: Manifest, store: VectorStore, embedder: Embedder) -> None:
        self.manifest = manifest
        self.store = store
        self.embedder = embedder

    def search(
        self,
        query: str,
        k: int = 10,
        mode: Mode = "hybrid",
        tags: Sequence[str] = (),
        path_prefix: str = "",
    ) -> list[Hit]:
        k = max(1, min(k, MAX_K))
        tags = [t.lstrip("#").lower() for t in tags if t.strip("#")]
        paths = self.manifest.paths_matching(tags, path_prefix)
        if paths is not None and not paths:
            return []
        ranked: dict[str, list[tuple[str, float]]] = {}
        depth = max(CANDIDATES, k) if mode == "hybrid" else k
        if mode in ("hybrid", "keyword"):
            match = fts_query(query)
            ranked["keyword"] = self.manifest.keyword(match, depth, paths) if match else []
        if mode in ("hybrid", "vector"):
            where = _where(tags, path_prefix)
            vector = self.embedder.embed_query(query)
            ranked["vector"] = self.store.query(vector, depth, where)
        fused = _fuse(ranked) if mode == "hybrid" else _single(ranked[mode])
        top = fused[:k]
        return self._hits(top, ranked)

    def _hits(
        self, top: list[tuple[str, float]], ranked: dict[str, list[tuple[str, float]]]
    ) -> list[Hit]:
        records = self.manifest.chunks_by_id([i for i, _ in top])
        positions = {
            name: {chunk_id: (rank, score) for rank, (chunk_id, score) in enumerate(hits, 1)}
            for name, hits in ranked.items()
        }
        tags_by_path: dict[str, tuple[str, ...]] = {}
        hits: list[Hit] = []
        for chunk_id, score in top:
            record = records.get(chunk_id)
            if record is None:
                continue  # in the store but not (yet) in the manifest: never show it
            if record.path not in tags_by_path:
                row = self.manifest.note_row(record.path) or {}
                tags_by_path[record.path] = tuple(row.get("tags", ()))
            parts: dict[str, Any] = {}
            for name, found in positions.items():
                if chunk_id in found:
                    rank, raw = found[chunk_id]
                    parts[name] = {"rank": rank, "score": round(raw, 6)}
            hits.append(
                Hit(
                    id=chunk_id,
                    path=record.path,
                    title=record.title,
                    section=record.section,
                    start_line=record.start_line,
                    end_line=record.end_line,
                    score=round(score, 6),
                    text=record.text,
                    tags=tags_by_path[record.path],
                    parts=parts,
                )
            )
        return hits


def _where(tags: Sequence[str], path_prefix: str) -> dict[str, Any] | None:
    clauses: list[dict[str, Any]] = [{"tag_paths": {"$contains": t}} for t in tags]
    prefix = path_prefix.strip("/")
    if prefix:
        clauses.append({"$or": [{"folders": {"$contains": prefix}}, {"path": prefix}]})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _single(hits: list[tuple[str, float]]) -> list[tuple[str, float]]:
    return list(hits)


def _fuse(ranked: dict[str, list[tuple[str, float]]]) -> list[tuple[str, float]]:
    scores: dict[str, float] = {}
    for hits in ranked.values():
        for rank, (chunk_id, _) in enumerate(hits, 1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
