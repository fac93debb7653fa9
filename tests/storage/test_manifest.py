"""storage/manifest: one transaction per batch of outcomes, and snapshots kept until a write."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import numpy as np

from tests.storage.outcomes import failed, left_out, written
from vaultd.query import Filters
from vaultd.records import Change
from vaultd.storage.manifest import Manifest


def test_meta_is_kept_across_a_reopen(tmp_path: Path) -> None:
    first = Manifest(tmp_path)
    first.set_meta("model", "m1")
    first.set_meta("model", "m2")
    first.close()
    again = Manifest(tmp_path)
    try:
        assert again.get_meta("model") == "m2"
        assert again.get_meta("absent") is None
    finally:
        again.close()


def test_apply_records_each_kind_of_outcome_and_counts_them(tmp_path: Path) -> None:
    with closing(Manifest(tmp_path, quarantine_after=1)) as manifest:
        writes = manifest.writes
        quarantined = manifest.apply(
            [
                written("ok.md", ["a", "b"], tags=["t/sub"], links=["other"]),
                failed("bad.md"),
                left_out("blob.md"),
                failed("worse.md"),
            ],
        )

        assert quarantined == ["bad.md", "worse.md"]
        assert manifest.writes == writes + 1  # one transaction, whatever its controllers wrote
        assert manifest.counts() == {
            "notes": 1,
            "failed": 0,
            "quarantined": 2,
            "left_out": 1,
            "chunks": 2,
        }
        assert manifest.links.backlinks("other.md") == ["ok.md"]
        assert manifest.filters.matching(Filters(tags=("t",))) == ["ok.md"]


def test_a_deleted_note_loses_its_chunks_tags_links_and_suspicion(manifest: Manifest) -> None:
    manifest.apply([written("a.md", tags=["t"], links=["b"])])
    manifest.failures.hold([Change("created", "a.md", size=1, mtime_ns=1, sha256="h")])
    manifest.failures.recover()
    assert manifest.failures.crashes() == {"a.md": 1}

    manifest.apply(deleted=["a.md"])
    assert manifest.notes.paths() == []
    assert manifest.notes.chunk_ids() == []
    assert manifest.filters.tag_counts() == []
    assert manifest.links.backlinks("b.md") == []
    assert manifest.failures.crashes() == {}


def test_done_notes_leave_in_flight_with_their_outcome(manifest: Manifest) -> None:
    manifest.failures.hold([Change("created", p, size=1, mtime_ns=1) for p in ("a.md", "b.md")])
    manifest.apply([written("a.md")], done=["a.md"])
    assert manifest.failures.in_flight() == ["b.md"]
    manifest.failures.abandon(["b.md"])
    assert manifest.failures.in_flight() == []


def test_counts_with_a_model_say_what_awaits_its_vectors(manifest: Manifest) -> None:
    note = written("a.md", ["one", "two"])
    manifest.apply([note, written("b.md", ["three"])])
    assert manifest.counts("m")["awaiting"] == 3

    manifest.add_vectors("m", {c.hash: np.ones(4, np.float32) for c in note.chunks})
    counts = manifest.counts("m")
    assert (counts["awaiting"], counts["embedded"], counts["notes"]) == (1, 1, 2)


def test_the_counts_are_read_in_one_snapshot(manifest: Manifest) -> None:
    """A batch recorded between two of the counts' reads once counted its note as awaiting
    and not yet as a note: status read "-1 of 0 notes embedded"."""
    recorded: list[str] = []

    def batch_between_reads(sql: str) -> None:
        # Recorded as the first index's writer records a batch: on its own connection.
        if sql.startswith("SELECT COUNT(*) FROM chunks") and not recorded:
            recorded.append(sql)
            manifest.apply([written("b.md", ["new"])])

    manifest.trace(batch_between_reads)
    try:
        before = manifest.counts("m")
    finally:
        manifest.trace(None)
    assert recorded, "the batch was recorded between the reads"
    assert 0 <= before["embedded"] <= before["notes"]
    assert before["chunks"] >= before["awaiting"]
    assert (before["notes"], before["awaiting"]) in ((0, 0), (1, 1))
    after = manifest.counts("m")
    assert (after["notes"], after["embedded"], after["awaiting"]) == (1, 0, 1)


def test_the_counts_are_kept_until_the_next_write(manifest: Manifest) -> None:
    """Status asks every second while a first index runs; what awaits is a scan of every
    chunk, read once per write."""
    manifest.apply([written("a.md")])
    first = manifest.counts("m")
    read: list[str] = []
    manifest.trace(lambda sql: read.append(sql) if "chunks" in sql else None)
    try:
        assert manifest.counts("m") == first
        assert read == []
        manifest.apply([written("b.md")])
        read.clear()
        assert manifest.counts("m")["notes"] == 2
        assert read
    finally:
        manifest.trace(None)


def test_snapshots_are_read_again_after_a_write(manifest: Manifest) -> None:
    manifest.apply([written("dir/Alpha.md")])
    assert manifest.links.paths_named(["ALPHA"]) == ["dir/Alpha.md"]
    assert manifest.counts("m")["awaiting"] == 1
    writes = manifest.writes

    manifest.apply([written("other/alpha.md")])
    assert manifest.writes == writes + 1
    assert sorted(manifest.links.paths_named(["alpha"])) == ["dir/Alpha.md", "other/alpha.md"]
    assert manifest.counts("m")["awaiting"] == 2


def test_vectors_of_other_models_and_unused_ones_are_forgotten(manifest: Manifest) -> None:
    note = written("a.md", ["kept"])
    manifest.apply([note])
    vector = np.arange(4, dtype=np.float32)
    manifest.add_vectors("old", {note.chunks[0].hash: vector})
    manifest.add_vectors("new", {note.chunks[0].hash: vector, "unused": vector})

    assert manifest.vectors.prune("new") == 1
    assert manifest.vectors.forget_other_models("new") == 1
    assert manifest.vectors.forget_other_models("new") == 0
    stored = manifest.vectors.get("new", [note.chunks[0].hash])
    np.testing.assert_array_equal(stored[note.chunks[0].hash], vector)
    assert manifest.vectors.get("old", [note.chunks[0].hash]) == {}


def test_distinctive_words_count_the_chunks_of_the_whole_index(
    manifest: Manifest,
) -> None:
    manifest.apply(
        [
            written("a.md", ["the zebra grazes"]),
            written("b.md", ["the zebra sleeps"]),
            written("c.md", ["the lion"]),
            written("d.md", ["the owl"]),
        ]
    )
    # "grazes" is only in the note's own chunk; "zebra" is rarer in the index than "the".
    words = manifest.keyword.distinctive_words(
        [["the", "zebra", "grazes"]], [["the", "zebra", "grazes"]], 5, max_share=0.5
    )
    assert words == ["zebra", "the"]
    manifest.apply([written("e.md", ["the grazes"])])
    assert manifest.keyword.distinctive_words(
        [["the", "zebra", "grazes"]], [["the", "zebra", "grazes"]], 5, max_share=0.5
    ) == ["grazes", "zebra", "the"]
