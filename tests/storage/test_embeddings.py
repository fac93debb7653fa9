"""storage/embeddings: vectors by model and text hash, and the chunks awaiting one."""

from __future__ import annotations

import sqlite3

import numpy as np

from tests.storage.outcomes import failed, written
from vaultd.storage import embeddings, notes, quarantine
from vaultd.storage.schema import Query


def _vector(seed: float) -> np.ndarray:
    return np.arange(4, dtype=np.float32) + seed


def test_vectors_read_back_by_hash_and_model(db: sqlite3.Connection, query: Query) -> None:
    embeddings.add(db, "m", {"h1": _vector(1), "h2": _vector(2)})
    embeddings.add(db, "m", {"h1": _vector(9)})  # a text's vector is kept, never replaced

    found = embeddings.vectors(query, "m", ["h1", "h2", "h3"])
    assert sorted(found) == ["h1", "h2"]
    np.testing.assert_array_equal(found["h1"], _vector(1))
    assert found["h1"].dtype == np.float32
    assert embeddings.vectors(query, "other", ["h1"]) == {}


def test_a_chunk_awaits_until_its_text_has_a_vector(db: sqlite3.Connection, query: Query) -> None:
    note = written("a.md", ["one", "two"])
    notes.write(db, note, now=1.0)
    assert [c.id for c in embeddings.awaiting(query, "m", 10)] == ["a.md#0", "a.md#1"]
    assert embeddings.awaiting_totals(query, "m") == embeddings.Awaiting(
        2, sum(c.tokens for c in note.chunks), 1
    )

    embeddings.add(db, "m", {note.chunks[0].hash: _vector(0)})
    assert [c.id for c in embeddings.awaiting(query, "m", 10)] == ["a.md#1"]
    assert embeddings.embedded_ids(query, "m") == ["a.md#0"]
    # Another model's vectors do not count.
    assert len(embeddings.awaiting(query, "other", 10)) == 2


def test_awaiting_takes_the_newest_notes_first_and_keeps_to_its_filters(
    db: sqlite3.Connection, query: Query
) -> None:
    old, new = written("a-old.md", ["x"], mtime_ns=1), written("z-new.md", ["y", "z"], mtime_ns=9)
    notes.write(db, old, now=1.0)
    notes.write(db, new, now=1.0)

    assert [c.id for c in embeddings.awaiting(query, "m", 10)] == [
        "z-new.md#0",
        "z-new.md#1",
        "a-old.md#0",
    ]
    assert [c.id for c in embeddings.awaiting(query, "m", 1)] == ["z-new.md#0"]
    assert [c.id for c in embeddings.awaiting(query, "m", 10, paths=["a-old.md"])] == ["a-old.md#0"]
    assert [c.id for c in embeddings.awaiting(query, "m", 10, paths=[])] == []
    assert [c.id for c in embeddings.awaiting(query, "m", 10, exclude=["z-new.md"])] == [
        "a-old.md#0"
    ]
    hashes = [new.chunks[1].hash]
    assert [c.id for c in embeddings.awaiting(query, "m", 10, hashes=hashes)] == ["z-new.md#1"]
    assert embeddings.awaiting_totals(query, "m", ["a-old.md"]).chunks == 1


def test_failed_and_rechunked_notes_await_nothing_unless_any_status(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, written("bad.md"), now=1.0)
    notes.write(db, written("again.md"), now=1.0)
    notes.write(db, written("ok.md"), now=1.0)
    quarantine.record_failure(db, failed("bad.md"), quarantine_after=0, when=2.0)
    notes.rechunk(db, ["again.md"])

    assert [c.path for c in embeddings.awaiting(query, "m", 10)] == ["ok.md"]
    every = ["bad.md", "again.md", "ok.md"]
    assert embeddings.awaiting_paths(query, "m", every) == {"ok.md"}
    assert embeddings.awaiting_paths(query, "m", every, any_status=True) == set(every)


def test_vectors_of_gives_each_notes_matrix_in_chunk_order(
    db: sqlite3.Connection, query: Query
) -> None:
    note = written("a.md", ["one", "two", "three"])
    notes.write(db, note, now=1.0)
    notes.write(db, written("none.md"), now=1.0)
    embeddings.add(db, "m", {note.chunks[2].hash: _vector(2), note.chunks[0].hash: _vector(0)})

    found = embeddings.vectors_of(query, "m", ["a.md", "none.md"])
    assert list(found) == ["a.md"]
    ids, matrix = found["a.md"]
    assert ids == ["a.md#0", "a.md#2"]
    np.testing.assert_array_equal(matrix, np.stack([_vector(0), _vector(2)]))


def test_prune_and_forget_other_models(db: sqlite3.Connection, query: Query) -> None:
    note = written("a.md")
    notes.write(db, note, now=1.0)
    used = note.chunks[0].hash
    embeddings.add(db, "m", {used: _vector(0), "unused": _vector(1)})
    embeddings.add(db, "old", {used: _vector(0)})

    assert embeddings.prune(db, "m") == 1
    assert embeddings.has_other_models(query, "m")
    assert embeddings.forget_other_models(db, "m") == 1
    assert not embeddings.has_other_models(query, "m")
    assert list(embeddings.vectors(query, "m", [used, "unused"])) == [used]
