"""storage/probe: the clean-close record, when the store must be probed, and a damaged store
moved aside."""

from __future__ import annotations

import json
from pathlib import Path

from vaultd.layout import CHROMA, CLEAN, DIRTY, MOVED_ASIDE
from vaultd.storage import probe


def _store(data_dir: Path) -> Path:
    chroma_dir = data_dir / CHROMA
    (chroma_dir / "segment").mkdir(parents=True)
    (chroma_dir / "chroma.sqlite3").write_bytes(b"x" * 10)
    (chroma_dir / "segment" / "data.bin").write_bytes(b"y" * 3)
    return chroma_dir


def test_no_store_needs_no_probe(tmp_path: Path) -> None:
    assert probe.why_probe(tmp_path, tmp_path / CHROMA) is None


def test_a_clean_close_of_unchanged_files_needs_no_probe(tmp_path: Path) -> None:
    chroma_dir = _store(tmp_path)
    assert probe.why_probe(tmp_path, chroma_dir) == "there is no record of a clean close"

    probe.mark_open(tmp_path)
    assert probe.closed_uncleanly(tmp_path)
    assert probe.why_probe(tmp_path, chroma_dir) == "the last process did not close the store"

    probe.mark_closed(tmp_path, chroma_dir)
    assert not probe.closed_uncleanly(tmp_path)
    assert probe.why_probe(tmp_path, chroma_dir) is None
    assert json.loads((tmp_path / CLEAN).read_text()) == probe.fingerprint(chroma_dir)
    assert sorted(probe.fingerprint(chroma_dir)) == ["chroma.sqlite3", "segment/data.bin"]

    # Opening again takes the record back: only the dirty marker speaks while open.
    probe.mark_open(tmp_path)
    assert not (tmp_path / CLEAN).exists()


def test_files_changed_since_the_clean_close_need_a_probe(tmp_path: Path) -> None:
    chroma_dir = _store(tmp_path)
    probe.mark_closed(tmp_path, chroma_dir)
    (chroma_dir / "segment" / "data.bin").write_bytes(b"longer now")
    assert probe.why_probe(tmp_path, chroma_dir) == (
        "the store's files changed since vaultd last closed it"
    )

    (tmp_path / CLEAN).write_text("{not json")
    assert "unreadable" in str(probe.why_probe(tmp_path, chroma_dir))


def test_a_store_that_does_not_open_is_moved_aside_with_a_record(tmp_path: Path) -> None:
    chroma_dir = _store(tmp_path)
    (tmp_path / DIRTY).touch()  # as a crash leaves it

    problem = probe.check_store(tmp_path, chroma_dir)
    assert problem
    assert not chroma_dir.exists()
    record = probe.last_moved_aside(tmp_path)
    assert record is not None and record["problem"] == problem
    moved = Path(record["moved_to"])
    assert moved.parent == tmp_path and moved.name.startswith("chroma.damaged-")
    assert (moved / "chroma.sqlite3").read_bytes() == b"x" * 10


def test_a_store_that_needs_no_probe_is_left_alone(tmp_path: Path) -> None:
    chroma_dir = _store(tmp_path)
    probe.mark_closed(tmp_path, chroma_dir)
    assert probe.check_store(tmp_path, chroma_dir) is None
    assert chroma_dir.exists()
    assert probe.last_moved_aside(tmp_path) is None
    (tmp_path / MOVED_ASIDE).write_text("[1, 2]")
    assert probe.last_moved_aside(tmp_path) is None
