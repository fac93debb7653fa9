"""storage/quarantine: attempts, crashes, suspects, quarantine and left-out files, and the notes
in hand of a process that may die."""

from __future__ import annotations

from tests.storage.outcomes import failed, left_out, written
from vaultd.answers import LeftOut, Quarantined
from vaultd.records import Change
from vaultd.storage.manifest import Manifest
from vaultd.storage.quarantine import FailuresController


def held(path: str, sha256: str = "h") -> Change:
    return Change("created", path, size=1, mtime_ns=1, sha256=sha256)


def test_failures_on_the_same_content_count_up_to_quarantine(manifest: Manifest) -> None:
    failures = FailuresController(manifest, quarantine_after=3)
    assert not failures.record_failure(failed("a.md"), when=1.0)
    assert not failures.record_failure(failed("a.md"), when=2.0)
    assert failures.failed() == [("a.md", "cannot parse", 2)]

    assert failures.record_failure(failed("a.md"), when=3.0)
    assert failures.failed() == []
    [kept] = failures.quarantined()
    assert (kept.path, kept.attempts, kept.since) == ("a.md", 3, 3.0)


def test_new_content_starts_the_count_again(manifest: Manifest) -> None:
    failures = FailuresController(manifest, quarantine_after=2)
    failures.record_failure(failed("a.md", "v1"), when=1.0)
    assert not failures.record_failure(failed("a.md", "v2"), when=2.0)
    assert failures.failed() == [("a.md", "cannot parse", 1)]


def test_unread_notes_and_a_zero_limit_are_never_quarantined(manifest: Manifest) -> None:
    limited, unlimited = FailuresController(manifest, 2), FailuresController(manifest, 0)
    for when in range(5):
        assert not limited.record_failure(failed("unread.md", ""), float(when))
        assert not unlimited.record_failure(failed("any.md"), float(when))
    assert manifest.failures.quarantined() == []


def test_a_failure_keeps_the_last_good_chunks(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["good"]), now=1.0)
    manifest.failures.record_failure(failed("a.md"), when=2.0)

    assert [c.chunk.text for c in manifest.notes.chunks_of("a.md")] == ["good"]
    assert not manifest.notes.known()["a.md"].ok


def test_release_gives_one_more_try_with_the_count_kept(manifest: Manifest) -> None:
    failures = FailuresController(manifest, quarantine_after=1)
    failures.record_failure(failed("a.md"), when=1.0)

    assert failures.release(["a.md", "never.md"]) == ["a.md"]
    assert failures.failed() == [("a.md", "cannot parse", 1)]
    assert failures.record_failure(failed("a.md"), when=2.0)


def test_left_out_files_count_passes_and_are_never_quarantined(manifest: Manifest) -> None:
    manifest.failures.record_left_out(left_out("b.bin"), when=1.0)
    manifest.failures.record_left_out(left_out("b.bin", "not_utf8", "bad bytes"), when=2.0)

    [left] = manifest.failures.left_out()
    assert (left.path, left.kind, left.reason, left.since) == (
        "b.bin",
        "not_utf8",
        "bad bytes",
        2.0,
    )
    assert manifest.notes.known()["b.bin"].attempts == 2
    assert manifest.notes.known()["b.bin"].left_out == "not_utf8"
    assert manifest.failures.quarantined() == []
    # A left-out file that later fails starts its count of failures afresh.
    manifest.failures.record_failure(failed("b.bin", "bytes-2"), when=3.0)
    assert manifest.failures.failed() == [("b.bin", "cannot parse", 1)]


def test_held_notes_are_in_flight_and_abandoning_clears_them(manifest: Manifest) -> None:
    manifest.failures.hold([held("a.md")])
    assert manifest.failures.in_flight() == ["a.md"]

    manifest.failures.abandon(["a.md"])
    assert manifest.failures.in_flight() == []


def test_a_crash_makes_suspects_of_the_notes_in_hand(manifest: Manifest) -> None:
    manifest.failures.hold([held("a.md", "ha"), held("b.md", "hb")])
    assert manifest.failures.in_flight() == ["a.md", "b.md"]

    outcomes = FailuresController(manifest, quarantine_after=3).recover()
    assert outcomes == [("a.md", 1, False, False), ("b.md", 1, False, False)]
    assert manifest.failures.in_flight() == []
    assert manifest.failures.crashes() == {"a.md": 1, "b.md": 1}
    assert manifest.failures.failed() == []


def test_a_suspect_that_kills_the_process_alone_fails_then_is_quarantined(
    manifest: Manifest,
) -> None:
    failures = FailuresController(manifest, quarantine_after=3)
    failures.hold([held("a.md", "ha"), held("b.md", "hb")])
    failures.recover()

    failures.hold([held("a.md", "ha")])
    assert failures.recover() == [("a.md", 2, True, False)]
    assert failures.failed() == [("a.md", "crashed the indexer 2 times", 2)]

    failures.hold([held("a.md", "ha")])
    assert failures.recover() == [("a.md", 3, True, True)]
    assert [q.path for q in failures.quarantined()] == ["a.md"]
    assert failures.crashes() == {"b.md": 1}


def test_a_new_process_makes_the_notes_in_flight_suspects_once(manifest: Manifest) -> None:
    manifest.failures.hold([held("a.md")])

    # The next process's controller.
    failures = FailuresController(manifest, quarantine_after=3)
    failures.start_pass()
    assert failures.suspects == {"a.md"}
    assert failures.in_flight() == []
    assert failures.crashes() == {"a.md": 1}

    # Only the first pass of a process recovers: a later one counts no second crash.
    failures.hold([held("b.md")])
    failures.start_pass()
    assert failures.crashes() == {"a.md": 1}

    failures.end_full_pass()
    assert failures.suspects == set()
    assert failures.crashes() == {}


def test_a_suspect_that_crashes_the_process_again_is_failed(manifest: Manifest) -> None:
    manifest.apply([written("a.md")])
    change = Change("modified", "a.md", size=1, mtime_ns=1)
    # Each a process's controller: one holds the note and dies, the next starts a pass.
    FailuresController(manifest, 2).hold([change])
    FailuresController(manifest, 2).start_pass()
    assert manifest.counts()["failed"] == 0  # once: only in hand when something else died

    FailuresController(manifest, 2).hold([change])
    FailuresController(manifest, 2).start_pass()
    counts = manifest.counts()
    # Failed alone, and its last good chunks still kept.
    assert (counts["failed"], counts["notes"], counts["chunks"]) == (1, 0, 1)


def test_finish_clears_in_flight_and_suspects_but_those_kept(manifest: Manifest) -> None:
    manifest.failures.hold([held("a.md", "ha"), held("b.md", "hb")])
    manifest.failures.recover()
    manifest.failures.hold([held("a.md", "ha"), held("b.md", "hb"), held("c.md", "hc")])

    manifest.failures.finish(["a.md", "b.md"], suspects={"b.md"})
    assert manifest.failures.in_flight() == ["c.md"]
    assert manifest.failures.crashes() == {"b.md": 1}
    manifest.failures.abandon(["c.md"])
    assert manifest.failures.in_flight() == []
    manifest.failures.forget("b.md")
    assert manifest.failures.crashes() == {}


def test_retry_releases_a_quarantined_note_at_the_next_pass(manifest: Manifest) -> None:
    failures = FailuresController(manifest, quarantine_after=1)
    failures.record_failure(failed("bad.md"), when=1.0)
    assert [q.path for q in failures.quarantined()] == ["bad.md"]
    failures.start_pass()

    failures.retry(["bad.md", "other.md"])
    assert [q.path for q in failures.quarantined()] == ["bad.md"]
    failures.start_pass()
    assert failures.quarantined() == []


def test_as_json_names_every_field() -> None:
    assert Quarantined("a", "r", 2, 1.5).as_json() == {
        "path": "a",
        "reason": "r",
        "attempts": 2,
        "since": 1.5,
    }
    assert LeftOut("a", "binary", "r", 1.5).as_json() == {
        "path": "a",
        "kind": "binary",
        "reason": "r",
        "since": 1.5,
    }
