"""The vectors table: every vector by its model and the hash of the text it embeds; and the
chunks awaiting one, which are exactly those whose text has no vector of the model (there is
no other mark to keep in step).

`VectorsController` is the manifest's `vectors` (not the Chroma store, `vectors.VectorStore`,
which is a cache of what this table holds).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vaultd.errors import StoreError
from vaultd.records import StoredChunk
from vaultd.storage.connection import Connection
from vaultd.storage.notes import CHUNK_COLUMNS, batches, stored
from vaultd.storage.schema import IN_KEYS, keys

#: More notes than this named at once (a checkout of another branch) select every chunk
#: awaiting: their list would pass SQLite's limit on parameters.
_MAX_PATHS = 20_000


@dataclass(frozen=True, slots=True)
class Awaiting:
    """What awaits vectors: chunks, their tokens, and the notes they belong to."""

    chunks: int
    tokens: int
    notes: int


class VectorsController:
    """The vectors by model and text hash, and the chunks still awaiting one."""

    def __init__(self, connection: Connection) -> None:
        self._query = connection.query
        self._transaction = connection.transaction
        self._path = connection.path

    def get(self, model: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """The vectors of `model` stored for these texts' hashes (those it has)."""
        hashes = set(hashes)
        if not hashes:
            return {}
        sql = f"SELECT hash, vector FROM vectors WHERE model = ? AND hash {IN_KEYS}"
        rows = self._query(sql, (model, keys(hashes)))
        return {h: np.frombuffer(blob, dtype=np.float32) for h, blob in rows}

    def of_notes(self, model: str, paths: Iterable[str]) -> dict[str, tuple[list[str], np.ndarray]]:
        """Each note's chunk ids in order and their vectors (one row each), for the chunks that
        have one; a note with none is left out."""
        ids: dict[str, list[str]] = {}
        rows: dict[str, list[bytes]] = {}
        paths = set(paths)
        if not paths:
            return {}
        for path, chunk_id, blob in self._query(
            # CROSS JOIN keeps the chunks outermost: the planner would otherwise walk
            # every vector of the model (ten times slower on a big vault).
            "SELECT c.path, c.id, v.vector FROM chunks c "
            "CROSS JOIN vectors v ON v.model = ? AND v.hash = c.hash "
            f"WHERE c.path {IN_KEYS} ORDER BY c.path, c.idx",
            (model, keys(paths)),
        ):
            ids.setdefault(path, []).append(chunk_id)
            rows.setdefault(path, []).append(blob)
        return {
            path: (
                ids[path],
                np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1),
            )
            for path, blobs in rows.items()
        }

    def embedded_ids(self, model: str) -> list[str]:
        """Ids of the chunks `model` has vectors for: what the store should hold."""
        rows = self._query(
            "SELECT c.id FROM chunks c JOIN vectors v ON v.model = ? AND v.hash = c.hash", (model,)
        )
        return [r[0] for r in rows]

    def add(self, model: str, new: Mapping[str, np.ndarray]) -> None:
        """Record vectors of `model` by the hash of the text each embeds."""
        with self._transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO vectors(model, hash, vector) VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in new.items()],
            )

    def prune(self, model: str) -> int:
        """Forget vectors no chunk uses any more; run after a whole pass, not mid-way."""
        with self._transaction() as db:
            cursor = db.execute(
                "DELETE FROM vectors WHERE model = ? AND hash NOT IN (SELECT hash FROM chunks)",
                (model,),
            )
            return cursor.rowcount

    def forget_other_models(self, model: str) -> int:
        """Delete the vectors of every model but `model`; returns how many.

        `prune` keeps a vector whose text is still a chunk, whatever its model, so an old
        model's vectors would outlive a switch: this finishes one. Called after every complete
        full pass, it writes only when there is something to delete.
        """
        try:
            if not self._query("SELECT 1 FROM vectors WHERE model != ? LIMIT 1", (model,)):
                return 0
            with self._transaction() as db:
                return int(db.execute("DELETE FROM vectors WHERE model != ?", (model,)).rowcount)
        except StoreError as exc:
            raise StoreError(
                f"cannot drop other models' vectors from {self._path}: {exc.__cause__ or exc}"
            ) from exc

    def awaiting(
        self,
        model: str,
        limit: int,
        *,
        paths: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        hashes: Sequence[str] | None = None,
    ) -> list[StoredChunk]:
        """Chunks of indexed notes that `model` has no vector for, the most recently modified
        notes first (at most `limit`; only of `paths` when given, none of `exclude`; only with
        one of these texts' `hashes` when given)."""
        where, params = _awaiting_where(model, paths, exclude)
        if hashes is not None:
            where += " AND c.hash IN (SELECT value FROM json_each(?))"
            params.append(json.dumps(list(hashes)))
        rows = self._query(
            f"SELECT {', '.join('c.' + col for col in CHUNK_COLUMNS.split(', '))} {where} "
            "ORDER BY n.mtime_ns DESC, c.path, c.idx LIMIT ?",
            [*params, limit],
        )
        return [stored(r) for r in rows]

    def awaiting_totals(self, model: str, paths: Iterable[str] | None = None) -> Awaiting:
        """How much awaits vectors of `model`: chunks, their tokens and their notes."""
        where, params = _awaiting_where(model, paths, ())
        chunks, tokens, notes = self._query(
            f"SELECT COUNT(*), COALESCE(SUM(c.tokens), 0), COUNT(DISTINCT c.path) {where}", params
        )[0]
        return Awaiting(chunks, tokens, notes)

    def awaiting_paths(
        self, model: str, paths: Iterable[str], *, any_status: bool = False
    ) -> set[str]:
        """Those of `paths` with a chunk awaiting vectors of `model`: not fully indexed yet; with
        `any_status`, failed and quarantined notes' chunks without vectors count too."""
        out: set[str] = set()
        for batch in batches(sorted(set(paths)), 500):
            where, params = _awaiting_where(model, batch, (), any_status=any_status)
            out.update(r[0] for r in self._query(f"SELECT DISTINCT c.path {where}", params))
        return out


def _awaiting_where(
    model: str, paths: Iterable[str] | None, exclude: Iterable[str], *, any_status: bool = False
) -> tuple[str, list[Any]]:
    """FROM and WHERE of the chunks awaiting vectors of `model`, with their parameters.

    A chunk awaits while no vector of the model is stored for its text. Only notes recorded as
    indexed count ('ok', and not marked for chunking again by `rechunk`): a failed note keeps
    its chunks searchable by their words and is retried when it changes.
    """
    sql = (
        "FROM chunks c JOIN notes n ON n.path = c.path WHERE "
        + ("" if any_status else "n.status = 'ok' AND n.sha256 != '' AND ")
        + "NOT EXISTS (SELECT 1 FROM vectors v WHERE v.model = ? AND v.hash = c.hash)"
    )
    params: list[Any] = [model]
    if paths is not None and len(wanted := sorted(set(paths))) <= _MAX_PATHS:
        sql += f" AND c.path IN ({','.join('?' * len(wanted))})" if wanted else " AND 0"
        params += wanted
    left = sorted(set(exclude))
    if left:
        sql += f" AND c.path NOT IN ({','.join('?' * len(left))})"
        params += left
    return sql, params
