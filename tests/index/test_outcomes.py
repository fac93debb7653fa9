"""index/outcomes: failed and left-out notes recorded, counted in the summary, and told of."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.storage.outcomes import failed, left_out
from vaultd.index.outcomes import Outcomes, Summary, failure
from vaultd.records import FileState, NoteFailed, NoteLeftOut
from vaultd.storage.manifest import Manifest


@pytest.fixture
def manifest(tmp_path: Path) -> Iterator[Manifest]:
    """A manifest quarantining a note at its second failure on the same content."""
    opened = Manifest(tmp_path / "data", quarantine_after=2)
    yield opened
    opened.close()


def test_failure_is_a_left_out_file_only_when_it_has_a_kind() -> None:
    state = FileState("a.md", 1, 1)
    assert failure(state, "h", "bad", "") == NoteFailed(state, "h", "bad")
    assert failure(state, "h", "bad", "binary") == NoteLeftOut(state, "h", "binary", "bad")


def test_failures_are_recorded_counted_and_told_of(manifest: Manifest) -> None:
    told: list[tuple[str, dict[str, Any]]] = []
    outcomes = Outcomes(manifest, on_note=lambda kind, **fields: told.append((kind, fields)))

    summary = outcomes.record_failures([failed("bad.md"), left_out("blob.md")])

    assert (summary.notes_failed, summary.notes_left_out) == (1, 1)
    assert summary.failures == [{"path": "bad.md", "reason": "cannot parse"}]
    assert summary.left_out == [{"path": "blob.md", "kind": "binary", "reason": "holds NUL bytes"}]
    assert sorted((f["path"], f["status"]) for _, f in told) == [
        ("bad.md", "failed"),
        ("blob.md", "left_out"),
    ]
    counts = manifest.counts()
    assert (counts["failed"], counts["left_out"]) == (1, 1)


def test_a_note_failing_again_on_the_same_content_is_quarantined(manifest: Manifest) -> None:
    told: list[str] = []
    outcomes = Outcomes(manifest, on_note=lambda kind, **fields: told.append(fields["status"]))
    for _ in range(2):
        outcomes.record_failures([failed("bad.md")])
    assert told == ["failed", "quarantined"]
    assert [q.path for q in manifest.failures.quarantined()] == ["bad.md"]


def test_nothing_failed_writes_nothing(manifest: Manifest) -> None:
    assert Outcomes(manifest).record_failures([]) == Summary()
    assert manifest.counts()["failed"] == 0


def test_parts_of_a_pass_add_up_in_the_order_they_came() -> None:
    scan = Summary(notes_seen=3, left_out=[{"path": "big.md"}], skipped=[{"path": "x"}])
    keyword = Summary(notes_changed=2, left_out=[{"path": "blob.md"}], seconds=0.5)
    whole = scan + keyword
    assert (whole.notes_seen, whole.notes_changed, whole.seconds) == (3, 2, 0.5)
    assert whole.left_out == [{"path": "big.md"}, {"path": "blob.md"}]
    assert whole.skipped == [{"path": "x"}]
    assert scan.left_out == [{"path": "big.md"}]  # the parts are left as they were


def test_the_summary_rounds_its_seconds() -> None:
    out = Summary(seconds=1.23456, keyword_seconds=0.98765).as_dict()
    assert (out["seconds"], out["keyword_seconds"]) == (1.235, 0.988)
