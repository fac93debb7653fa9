"""storage/quarantine: attempts, crashes, suspects, quarantine and left-out files."""

from __future__ import annotations

from tests.storage.outcomes import failed, left_out, written
from vaultd.answers import LeftOut, Quarantined
from vaultd.storage.manifest import Manifest


def test_failures_on_the_same_content_count_up_to_quarantine(manifest: Manifest) -> None:
    assert not manifest.failures.record_failure(failed("a.md"), quarantine_after=3, when=1.0)
    assert not manifest.failures.record_failure(failed("a.md"), quarantine_after=3, when=2.0)
    assert manifest.failures.failed() == [("a.md", "cannot parse", 2)]

    assert manifest.failures.record_failure(failed("a.md"), quarantine_after=3, when=3.0)
    assert manifest.failures.failed() == []
    [held] = manifest.failures.quarantined()
    assert (held.path, held.attempts, held.since) == ("a.md", 3, 3.0)


def test_new_content_starts_the_count_again(manifest: Manifest) -> None:
    manifest.failures.record_failure(failed("a.md", "v1"), quarantine_after=2, when=1.0)
    assert not manifest.failures.record_failure(failed("a.md", "v2"), quarantine_after=2, when=2.0)
    assert manifest.failures.failed() == [("a.md", "cannot parse", 1)]


def test_unread_notes_and_a_zero_limit_are_never_quarantined(manifest: Manifest) -> None:
    for when in range(5):
        assert not manifest.failures.record_failure(failed("unread.md", ""), 2, float(when))
        assert not manifest.failures.record_failure(failed("any.md"), 0, float(when))
    assert manifest.failures.quarantined() == []


def test_a_failure_keeps_the_last_good_chunks(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", ["good"]), now=1.0)
    manifest.failures.record_failure(failed("a.md"), quarantine_after=0, when=2.0)

    assert [c.text for c in manifest.notes.chunks_of("a.md")] == ["good"]
    assert not manifest.notes.known()["a.md"].ok


def test_release_gives_one_more_try_with_the_count_kept(manifest: Manifest) -> None:
    manifest.failures.record_failure(failed("a.md"), quarantine_after=1, when=1.0)

    assert manifest.failures.release(["a.md", "never.md"]) == ["a.md"]
    assert manifest.failures.failed() == [("a.md", "cannot parse", 1)]
    assert manifest.failures.record_failure(failed("a.md"), quarantine_after=1, when=2.0)


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
    manifest.failures.record_failure(failed("b.bin", "bytes-2"), quarantine_after=0, when=3.0)
    assert manifest.failures.failed() == [("b.bin", "cannot parse", 1)]


def test_a_crash_makes_suspects_of_the_notes_in_hand(manifest: Manifest) -> None:
    manifest.failures.hold([("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb")])
    assert manifest.failures.in_flight() == ["a.md", "b.md"]

    outcomes = manifest.failures.recover(quarantine_after=3)
    assert outcomes == [("a.md", 1, False, False), ("b.md", 1, False, False)]
    assert manifest.failures.in_flight() == []
    assert manifest.failures.suspects() == {"a.md": 1, "b.md": 1}
    assert manifest.failures.failed() == []


def test_a_suspect_that_kills_the_process_alone_fails_then_is_quarantined(
    manifest: Manifest,
) -> None:
    manifest.failures.hold([("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb")])
    manifest.failures.recover(quarantine_after=3)

    manifest.failures.hold([("a.md", 1, 1, "ha")])
    assert manifest.failures.recover(quarantine_after=3) == [("a.md", 2, True, False)]
    assert manifest.failures.failed() == [("a.md", "crashed the indexer 2 times", 2)]

    manifest.failures.hold([("a.md", 1, 1, "ha")])
    assert manifest.failures.recover(quarantine_after=3) == [("a.md", 3, True, True)]
    assert [q.path for q in manifest.failures.quarantined()] == ["a.md"]
    assert manifest.failures.suspects() == {"b.md": 1}


def test_finish_clears_in_flight_and_suspects_but_those_kept(manifest: Manifest) -> None:
    manifest.failures.hold([("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb")])
    manifest.failures.recover(quarantine_after=0)
    manifest.failures.hold([("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb"), ("c.md", 1, 1, "hc")])

    manifest.failures.finish(["a.md", "b.md"], suspects={"b.md"})
    assert manifest.failures.in_flight() == ["c.md"]
    assert manifest.failures.suspects() == {"b.md": 1}
    manifest.failures.clear_in_flight(["c.md"])
    assert manifest.failures.in_flight() == []
    manifest.failures.forget("b.md")
    assert manifest.failures.suspects() == {}


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
