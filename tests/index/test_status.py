"""index/status: what `vaultd status` reports of an open index, and the JSON it is served as."""

from __future__ import annotations

from pathlib import Path

from tests.small_vault import indexed
from tests.storage.outcomes import failed
from vaultd.index.open import Index
from vaultd.index.status import index_status, kinds_text, not_indexed

NOTES = {
    "a.md": "# A\n\nThe keeper climbs the stairs.\n",
    "b.md": "# B\n\nGulls at low tide.\n",
    "blob.md": b"binary\x00bytes\x00here",
    "photo.png": b"\x89PNG\r\n\x1a\n",
}


def test_the_status_of_an_index_counts_what_it_holds(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        status = index_status(index)
        assert (status.notes, status.found, status.awaiting) == (2, 3, 0)
        assert status.embedded == 2 and status.chunks >= 2
        assert [e.path for e in status.left_out] == ["blob.md"]
        assert not status.troubled
        assert status.not_indexed == {"image": 1}

        report = status.as_json()
        assert report["vault"] == str(index.vault)
        assert report["store"]["data_dir"] == str(index.data_dir)
        assert report["left_out"][0]["path"] == "blob.md"
        assert kinds_text(report)[-1] == "  not indexed (by kind): 1 image"


def test_a_note_indexed_in_part_is_told_and_a_failure_troubles(tmp_path: Path) -> None:
    with indexed(tmp_path, {"bad.md": "---\nkey: [unclosed\n---\nbody\n"}) as index:
        status = index_status(index)
        assert [entry.path for entry in status.in_part] == ["bad.md"]
        assert "invalid YAML" in status.as_json()["in_part"][0]["reason"]
        assert not status.troubled

        index.manifest.apply([failed("worse.md")])
        status = index_status(index)
        assert status.troubled
        assert status.as_json()["failed"] == [
            {"path": "worse.md", "reason": "cannot parse", "attempts": 1}
        ]


def assert_each_note_counted_once(index: Index) -> None:
    """Record a.md as failed between status's first reads and the failed notes' read: the
    status still counts each of the two notes once."""
    manifest = index.manifest
    recorded: list[str] = []

    def batch_between_reads(sql: str) -> None:
        if "status = 'failed'" in sql and not recorded:
            recorded.append(sql)
            manifest.apply([failed("a.md")])

    manifest.trace(batch_between_reads)
    try:
        status = index_status(index)
    finally:
        manifest.trace(None)
    assert recorded, "the batch was recorded between the reads"
    listed = len(status.failed) + len(status.quarantined) + len(status.left_out)
    assert status.notes + listed == 2, status
    after = index_status(index)
    assert after.notes == 1 and [f.path for f in after.failed] == ["a.md"]


def test_a_batch_recorded_while_status_reads_counts_each_note_once(tmp_path: Path) -> None:
    """A note that failed between status's reads was counted among the notes and listed as
    failed: every read of one status now sees the same commit."""
    with indexed(tmp_path, {"a.md": NOTES["a.md"], "b.md": NOTES["b.md"]}) as index:
        assert_each_note_counted_once(index)


def test_counts_kept_from_an_earlier_status_are_of_the_commit_the_rest_reads(
    tmp_path: Path,
) -> None:
    """The counts are kept until the next write, and a status that found them kept read
    nothing for them: its snapshot began at its next read, so a batch recorded in between was
    in the failed notes and not in the counts (the note counted twice)."""
    with indexed(tmp_path, {"a.md": NOTES["a.md"], "b.md": NOTES["b.md"]}) as index:
        assert index_status(index).notes == 2  # the counts are kept from here
        assert_each_note_counted_once(index)


def test_the_not_indexed_counts_read_back_or_none() -> None:
    assert not_indexed('{"image": 2, "other": 1}') == {"image": 2, "other": 1}
    assert not_indexed(None) == not_indexed("not json") == not_indexed("[1]") == {}
    assert kinds_text({"kinds": {"note": {"ok": 3}}}) == []
    assert kinds_text({"kinds": {"pdf": {"ok": 2, "left_out": 1}}}) == [
        "kinds:",
        "  pdf: 1 left out, 2 ok",
    ]
