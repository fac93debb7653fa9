"""storage/embeddings: vectors by model and text hash, and the chunks awaiting one."""

from __future__ import annotations

import numpy as np

from tests.storage.outcomes import failed, written
from vaultd.storage import embeddings
from vaultd.storage.manifest import Manifest


def _vector(seed: float) -> np.ndarray:
    return np.arange(4, dtype=np.float32) + seed


def test_vectors_read_back_by_hash_and_model(manifest: Manifest) -> None:
    manifest.vectors.add("m", {"h1": _vector(1), "h2": _vector(2)})
    manifest.vectors.add("m", {"h1": _vector(9)})  # a text's vector is kept, never replaced

    found = manifest.vectors.get("m", ["h1", "h2", "h3"])
    assert sorted(found) == ["h1", "h2"]
    np.testing.assert_array_equal(found["h1"], _vector(1))
    assert found["h1"].dtype == np.float32
    assert manifest.vectors.get("other", ["h1"]) == {}


def test_a_chunk_awaits_until_its_text_has_a_vector(manifest: Manifest) -> None:
    note = written("a.md", ["one", "two"])
    manifest.notes.write(note, now=1.0)
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10)] == ["a.md#0", "a.md#1"]
    assert manifest.vectors.awaiting_totals("m") == embeddings.Awaiting(
        2, sum(c.tokens for c in note.chunks), 1
    )

    manifest.vectors.add("m", {note.chunks[0].hash: _vector(0)})
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10)] == ["a.md#1"]
    assert manifest.vectors.embedded_ids("m") == ["a.md#0"]
    # Another model's vectors do not count.
    assert len(manifest.vectors.awaiting("other", 10)) == 2


def test_awaiting_takes_the_newest_notes_first_and_keeps_to_its_filters(manifest: Manifest) -> None:
    old, new = written("a-old.md", ["x"], mtime_ns=1), written("z-new.md", ["y", "z"], mtime_ns=9)
    manifest.notes.write(old, now=1.0)
    manifest.notes.write(new, now=1.0)

    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10)] == [
        "z-new.md#0",
        "z-new.md#1",
        "a-old.md#0",
    ]
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 1)] == ["z-new.md#0"]
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10, paths=["a-old.md"])] == [
        "a-old.md#0"
    ]
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10, paths=[])] == []
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10, exclude=["z-new.md"])] == [
        "a-old.md#0"
    ]
    hashes = [new.chunks[1].hash]
    assert [c.chunk.id for c in manifest.vectors.awaiting("m", 10, hashes=hashes)] == ["z-new.md#1"]
    assert manifest.vectors.awaiting_totals("m", ["a-old.md"]).chunks == 1


def test_failed_and_rechunked_notes_await_nothing_unless_any_status(manifest: Manifest) -> None:
    manifest.notes.write(written("bad.md"), now=1.0)
    manifest.notes.write(written("again.md"), now=1.0)
    manifest.notes.write(written("ok.md"), now=1.0)
    manifest.failures.record_failure(failed("bad.md"), when=2.0)
    manifest.notes.rechunk(["again.md"])

    assert [c.path for c in manifest.vectors.awaiting("m", 10)] == ["ok.md"]
    every = ["bad.md", "again.md", "ok.md"]
    assert manifest.vectors.awaiting_paths("m", every) == {"ok.md"}
    assert manifest.vectors.awaiting_paths("m", every, any_status=True) == set(every)


def test_vectors_of_gives_each_notes_matrix_in_chunk_order(manifest: Manifest) -> None:
    note = written("a.md", ["one", "two", "three"])
    manifest.notes.write(note, now=1.0)
    manifest.notes.write(written("none.md"), now=1.0)
    manifest.vectors.add("m", {note.chunks[2].hash: _vector(2), note.chunks[0].hash: _vector(0)})

    found = manifest.vectors.of_notes("m", ["a.md", "none.md"])
    assert list(found) == ["a.md"]
    ids, matrix = found["a.md"]
    assert ids == ["a.md#0", "a.md#2"]
    np.testing.assert_array_equal(matrix, np.stack([_vector(0), _vector(2)]))


def test_prune_and_forget_other_models(manifest: Manifest) -> None:
    note = written("a.md")
    manifest.notes.write(note, now=1.0)
    used = note.chunks[0].hash
    manifest.vectors.add("m", {used: _vector(0), "unused": _vector(1)})
    manifest.vectors.add("old", {used: _vector(0)})

    assert manifest.vectors.prune("m") == 1
    assert manifest.vectors.forget_other_models("m") == 1
    writes = manifest.writes
    assert manifest.vectors.forget_other_models("m") == 0
    assert manifest.writes == writes  # nothing to delete: nothing written
    assert list(manifest.vectors.get("m", [used, "unused"])) == [used]
