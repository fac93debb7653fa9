"""index/ledger: notes in flight when a process died become suspects, tried alone, then cleared."""

from __future__ import annotations

from tests.storage.outcomes import failed, written
from vaultd.index.ledger import Ledger
from vaultd.records import Change
from vaultd.storage.manifest import Manifest


def test_held_notes_are_in_flight_and_abandoning_clears_them(manifest: Manifest) -> None:
    ledger = Ledger(manifest, quarantine_after=3)
    marked: list[str] = []
    ledger.hold([Change("created", "a.md", size=1, mtime_ns=1, sha256="h")], marked)
    assert marked == ["a.md"]
    assert manifest.failures.in_flight() == ["a.md"]

    ledger.abandon(["a.md"])
    assert manifest.failures.in_flight() == []


def test_a_new_process_makes_the_notes_in_flight_suspects_once(manifest: Manifest) -> None:
    Ledger(manifest, 3).hold([Change("created", "a.md", size=1, mtime_ns=1)], [])

    ledger = Ledger(manifest, 3)
    ledger.start_pass()
    assert ledger.suspects == {"a.md"}
    assert manifest.failures.in_flight() == []
    assert manifest.failures.suspects() == {"a.md": 1}

    # Only the first pass of a process recovers: a later one counts no second crash.
    ledger.hold([Change("created", "b.md", size=1, mtime_ns=1)], [])
    ledger.start_pass()
    assert manifest.failures.suspects() == {"a.md": 1}

    ledger.end_full_pass()
    assert ledger.suspects == set()
    assert manifest.failures.suspects() == {}


def test_a_suspect_that_crashes_the_process_again_is_failed(manifest: Manifest) -> None:
    manifest.apply([written("a.md")])
    Ledger(manifest, 2).hold([Change("modified", "a.md", size=1, mtime_ns=1)], [])
    Ledger(manifest, 2).start_pass()
    assert manifest.counts()["failed"] == 0  # once: only in hand when something else died

    Ledger(manifest, 2).hold([Change("modified", "a.md", size=1, mtime_ns=1)], [])
    Ledger(manifest, 2).start_pass()
    counts = manifest.counts()
    # Failed alone, and its last good chunks still kept.
    assert (counts["failed"], counts["notes"], counts["chunks"]) == (1, 0, 1)


def test_retry_releases_a_quarantined_note_at_the_next_pass(manifest: Manifest) -> None:
    manifest.apply([failed("bad.md")], quarantine_after=1)
    assert [q.path for q in manifest.failures.quarantined()] == ["bad.md"]
    ledger = Ledger(manifest, 1)
    ledger.start_pass()

    ledger.retry(["bad.md", "other.md"])
    assert [q.path for q in manifest.failures.quarantined()] == ["bad.md"]
    ledger.start_pass()
    assert manifest.failures.quarantined() == []
