"""storage/quarantine: attempts, crashes, suspects, quarantine and left-out files."""

from __future__ import annotations

import sqlite3

from tests.storage.outcomes import failed, left_out, written
from vaultd.answers import LeftOut, Quarantined
from vaultd.storage import notes, quarantine
from vaultd.storage.schema import Query


def test_failures_on_the_same_content_count_up_to_quarantine(
    db: sqlite3.Connection, query: Query
) -> None:
    assert not quarantine.record_failure(db, failed("a.md"), quarantine_after=3, when=1.0)
    assert not quarantine.record_failure(db, failed("a.md"), quarantine_after=3, when=2.0)
    assert quarantine.failed(query) == [("a.md", "cannot parse", 2)]

    assert quarantine.record_failure(db, failed("a.md"), quarantine_after=3, when=3.0)
    assert quarantine.failed(query) == []
    [held] = quarantine.quarantined(query)
    assert (held.path, held.attempts, held.since) == ("a.md", 3, 3.0)


def test_new_content_starts_the_count_again(db: sqlite3.Connection, query: Query) -> None:
    quarantine.record_failure(db, failed("a.md", "v1"), quarantine_after=2, when=1.0)
    assert not quarantine.record_failure(db, failed("a.md", "v2"), quarantine_after=2, when=2.0)
    assert quarantine.failed(query) == [("a.md", "cannot parse", 1)]


def test_unread_notes_and_a_zero_limit_are_never_quarantined(
    db: sqlite3.Connection, query: Query
) -> None:
    for when in range(5):
        assert not quarantine.record_failure(db, failed("unread.md", ""), 2, float(when))
        assert not quarantine.record_failure(db, failed("any.md"), 0, float(when))
    assert quarantine.quarantined(query) == []


def test_a_failure_keeps_the_last_good_chunks(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md", ["good"]), now=1.0)
    quarantine.record_failure(db, failed("a.md"), quarantine_after=0, when=2.0)

    assert [c.text for c in notes.chunks_of(query, "a.md")] == ["good"]
    assert not notes.known(query)["a.md"].ok


def test_release_gives_one_more_try_with_the_count_kept(
    db: sqlite3.Connection, query: Query
) -> None:
    quarantine.record_failure(db, failed("a.md"), quarantine_after=1, when=1.0)

    assert quarantine.release(db, ["a.md", "never.md"]) == ["a.md"]
    assert quarantine.failed(query) == [("a.md", "cannot parse", 1)]
    assert quarantine.record_failure(db, failed("a.md"), quarantine_after=1, when=2.0)


def test_left_out_files_count_passes_and_are_never_quarantined(
    db: sqlite3.Connection, query: Query
) -> None:
    quarantine.record_left_out(db, left_out("b.bin"), when=1.0)
    quarantine.record_left_out(db, left_out("b.bin", "not_utf8", "bad bytes"), when=2.0)

    [left] = quarantine.left_out(query)
    assert (left.path, left.kind, left.reason, left.since) == (
        "b.bin",
        "not_utf8",
        "bad bytes",
        2.0,
    )
    assert notes.known(query)["b.bin"].attempts == 2
    assert notes.known(query)["b.bin"].left_out == "not_utf8"
    assert quarantine.quarantined(query) == []
    # A left-out file that later fails starts its count of failures afresh.
    quarantine.record_failure(db, failed("b.bin", "bytes-2"), quarantine_after=0, when=3.0)
    assert quarantine.failed(query) == [("b.bin", "cannot parse", 1)]


def test_a_crash_makes_suspects_of_the_notes_in_hand(db: sqlite3.Connection, query: Query) -> None:
    quarantine.hold(db, [("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb")], now=1.0)
    assert quarantine.in_flight(query) == ["a.md", "b.md"]

    outcomes = quarantine.recover(db, quarantine_after=3)
    assert outcomes == [("a.md", 1, False, False), ("b.md", 1, False, False)]
    assert quarantine.in_flight(query) == []
    assert quarantine.suspects(query) == {"a.md": 1, "b.md": 1}
    assert quarantine.failed(query) == []


def test_a_suspect_that_kills_the_process_alone_fails_then_is_quarantined(
    db: sqlite3.Connection, query: Query
) -> None:
    quarantine.hold(db, [("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb")], now=1.0)
    quarantine.recover(db, quarantine_after=3)

    quarantine.hold(db, [("a.md", 1, 1, "ha")], now=2.0)
    assert quarantine.recover(db, quarantine_after=3) == [("a.md", 2, True, False)]
    assert quarantine.failed(query) == [("a.md", "crashed the indexer 2 times", 2)]

    quarantine.hold(db, [("a.md", 1, 1, "ha")], now=3.0)
    assert quarantine.recover(db, quarantine_after=3) == [("a.md", 3, True, True)]
    assert [q.path for q in quarantine.quarantined(query)] == ["a.md"]
    assert quarantine.suspects(query) == {"b.md": 1}


def test_finish_clears_in_flight_and_suspects_but_those_kept(
    db: sqlite3.Connection, query: Query
) -> None:
    quarantine.hold(db, [("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb")], now=1.0)
    quarantine.recover(db, quarantine_after=0)
    quarantine.hold(db, [("a.md", 1, 1, "ha"), ("b.md", 1, 1, "hb"), ("c.md", 1, 1, "hc")], 2.0)

    quarantine.finish(db, ["a.md", "b.md"], suspects={"b.md"})
    assert quarantine.in_flight(query) == ["c.md"]
    assert quarantine.suspects(query) == {"b.md": 1}
    quarantine.clear_in_flight(db, ["c.md"])
    assert quarantine.in_flight(query) == []
    quarantine.forget(db, "b.md")
    assert quarantine.suspects(query) == {}


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
