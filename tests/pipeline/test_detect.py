"""Change detection: when a stat may stand for the bytes it was recorded with (issue 35,
finding 1), the decisions of `pipeline/detect.py` alone and then through a real index."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.small_vault import indexed, write_vault
from vaultd.config import load_config
from vaultd.daemon.worker import check_share
from vaultd.index.open import Index, open_index
from vaultd.pipeline.detect import GRANULARITY_NS, classify, due_for_check, scan, trusted
from vaultd.pipeline.discover import Discovery
from vaultd.query import SearchQuery
from vaultd.records import FileState, KnownNote
from vaultd.storage.schema import SCHEMA_VERSION

S = 10**9
#: A moment well after every time below.
HASHED = 1_000 * S


def found(index: Index, query: str) -> list[str]:
    """The notes a keyword search finds, best first."""
    return [h.path for h in index.searcher.search(SearchQuery(query, mode="keyword")).hits]


def known(path: str = "a.md", **fields: int) -> KnownNote:
    values = {"size": 10, "mtime_ns": 100 * S, "ctime_ns": 100 * S, "inode": 7, "hashed_ns": HASHED}
    values.update(fields)
    return KnownNote(
        path,
        values["size"],
        values["mtime_ns"],
        "old",
        True,
        0,
        ctime_ns=values["ctime_ns"],
        inode=values["inode"],
        hashed_ns=values["hashed_ns"],
    )


def state(path: str = "a.md", **fields: int) -> FileState:
    values = {"size": 10, "mtime_ns": 100 * S, "ctime_ns": 100 * S, "inode": 7}
    values.update(fields)
    return FileState(path, values["size"], values["mtime_ns"], values["ctime_ns"], values["inode"])


# -- the decisions -------------------------------------------------------------------------


def test_the_stat_as_recorded_long_before_the_hash_is_trusted() -> None:
    assert trusted(known(), state())
    result = scan({"a.md": known()}, [state()])
    assert (result.unchanged, result.candidates, result.distrusted) == (1, [], 0)


def test_a_mtime_put_back_is_seen_by_the_ctime() -> None:
    """`touch -r ref.md note` after an edit of one size: size and mtime as recorded, but the
    kernel set the ctime to the time of the touch."""
    edited = state(ctime_ns=2_000 * S)
    assert not trusted(known(), edited)
    assert scan({"a.md": known()}, [edited]).candidates == [edited]


def test_a_new_inode_is_read() -> None:
    """An atomic save (a new file renamed over the note) with the old times copied over."""
    assert not trusted(known(), state(inode=8))


def test_a_stat_recorded_within_a_tick_of_the_last_change_is_not_trusted() -> None:
    """Two saves of one size within one second on a filesystem with 1-second timestamps get
    the same mtime and ctime: a stat recorded in that second cannot tell them apart."""
    saved = 500 * S  # whole seconds: what such a filesystem records
    old = known(mtime_ns=saved, ctime_ns=saved, hashed_ns=saved + S // 2)
    again = state(mtime_ns=saved, ctime_ns=saved)
    assert not trusted(old, again)
    result = scan({"a.md": old}, [again])
    assert result.candidates == [again] and result.distrusted == 1
    # Once hashed more than a tick after the last change, the same stat is trusted.
    assert trusted(
        known(mtime_ns=saved, ctime_ns=saved, hashed_ns=saved + GRANULARITY_NS + 1), again
    )
    assert not trusted(
        known(mtime_ns=saved, ctime_ns=saved, hashed_ns=saved + GRANULARITY_NS), again
    )


def test_the_racy_rule_goes_by_the_ctime_when_the_mtime_was_put_back() -> None:
    """A note touched back (old mtime, new ctime) and hashed in the same tick as a second
    edit that is touched back too: only the ctime lies within the tick of the hash."""
    changed = 500 * S
    old = known(mtime_ns=100 * S, ctime_ns=changed, hashed_ns=changed + S // 2)
    assert not trusted(old, state(mtime_ns=100 * S, ctime_ns=changed))


def test_unknown_hash_time_and_failed_notes_are_always_read() -> None:
    """Rows from before schema 9 have no ctime, inode or hash time (0)."""
    assert not trusted(known(ctime_ns=0, inode=0, hashed_ns=0), state(ctime_ns=0, inode=0))
    failed = KnownNote("a.md", 10, 100 * S, "old", False, 1, ctime_ns=100 * S, inode=7)
    assert not trusted(failed, state())
    # Not counted as distrusted: a failed note is read on every pass anyway.
    assert scan({"a.md": failed}, [state()]).distrusted == 0


def test_notes_named_for_verification_are_read_whatever_their_stat() -> None:
    notes = {"a.md": known("a.md"), "b.md": known("b.md")}
    result = scan(notes, [state("a.md"), state("b.md")], verify={"b.md"})
    assert [s.path for s in result.candidates] == ["b.md"]
    assert (result.unchanged, result.distrusted) == (1, 1)


def test_a_rehash_with_the_same_bytes_is_verified_or_touched() -> None:
    old = {"a.md": known(), "b.md": known("b.md")}
    same = FileState("a.md", 10, 100 * S, 2_000 * S, 7, HASHED + S)
    newer = FileState("b.md", 10, 200 * S, 2_000 * S, 7, HASHED + S)
    changes = classify(old, [(same, "old"), (newer, "old")], [])
    assert [(c.kind, c.path) for c in changes] == [("verified", "a.md"), ("touched", "b.md")]
    # The stat and the time of the hash travel with the change to the manifest.
    assert changes[0].state == same


def test_a_full_pass_checks_the_notes_hashed_longest_ago_first() -> None:
    notes = {f"n{i}.md": known(f"n{i}.md", hashed_ns=(i + 1) * S) for i in range(10)}
    notes["never.md"] = known("never.md", hashed_ns=0)
    notes["failed.md"] = KnownNote("failed.md", 1, 1, "x", False, 1)
    assert due_for_check(notes, 0) == set()
    assert due_for_check(notes, 0.25) == {"never.md", "n0.md", "n1.md"}  # ceil(11 / 4)
    assert due_for_check(notes, 1) == set(notes) - {"failed.md"}


def test_a_rotation_reads_every_note_within_one_cycle() -> None:
    """Each check records a later hash time, so the next pass takes the next oldest."""
    notes = {f"n{i}.md": known(f"n{i}.md", hashed_ns=S) for i in range(50)}
    seen: set[str] = set()
    clock = 2 * S
    for _ in range(10):  # a tenth each pass
        due = due_for_check(notes, 0.1)
        assert not due & seen
        seen |= due
        for path in due:
            notes[path] = known(path, hashed_ns=clock)
        clock += S
    assert seen == set(notes)


# -- through a real index ------------------------------------------------------------------


def swap_word(file: Path, old: str, new: str) -> None:
    """An edit of one size, with the mtime put back (`touch -r`)."""
    before = file.stat()
    file.write_bytes(file.read_bytes().replace(old.encode(), new.encode()))
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (file.stat().st_size, file.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)


NOTES = {"a.md": "# A\n\nOtters float in kelp.\n", "b.md": "# B\n\nHerons wade.\n"}
LONG_AGO = {"a.md": time.time() - 3600, "b.md": time.time() - 3600}


def settled(index: Index) -> None:
    """Pass until no note is read: those written (or given their mtime) within a tick of
    their hash are read once more after it, then trusted."""
    deadline = time.monotonic() + 60
    while index.indexer.reconcile().notes_read:
        assert time.monotonic() < deadline, "notes still read on every pass"


def test_a_pass_reads_nothing_the_stat_vouches_for(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES, LONG_AGO) as index:
        settled(index)
        again = index.indexer.reconcile()
        assert (again.notes_read, again.notes_unchanged, again.notes_checked) == (0, 2, 0)
        # Asked to check all: each is read, found as recorded, and nothing is written.
        checked = index.indexer.reconcile(check=1.0)
        assert (checked.notes_read, checked.notes_checked) == (2, 2)
        assert (checked.notes_changed, checked.notes_touched, checked.chunks_embedded) == (0, 0, 0)


def test_an_edit_that_keeps_size_and_mtime_is_indexed_by_a_pass(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES, LONG_AGO) as index:
        settled(index)
        swap_word(tmp_path / "vault" / "a.md", "kelp", "reef")
        assert not index.indexer.is_current("a.md")
        summary = index.indexer.reconcile()
        assert (summary.notes_read, summary.notes_changed) == (1, 1)
        assert found(index, "reef") == ["a.md"]
        assert found(index, "kelp") == []
        assert index.indexer.is_current("a.md")


def test_a_note_hashed_within_a_tick_of_its_save_is_read_again_once(tmp_path: Path) -> None:
    """Saved just now: the stat recorded with it cannot vouch for it yet. Read once more after
    a tick, it can: a racy note costs one more read, not one on every pass."""
    with indexed(tmp_path, {"a.md": NOTES["a.md"]}) as index:
        settled(index)
        assert index.indexer.reconcile().notes_read == 0


def test_schema_8_gains_the_stat_columns_and_reads_each_note_once(tmp_path: Path) -> None:
    """A store from before schema 9 knows no ctime, inode or hash time: the first pass after
    the upgrade reads every note once (finding an edit that kept size and mtime meanwhile),
    embeds nothing, and the next pass reads none."""
    with indexed(tmp_path, NOTES, LONG_AGO) as index:
        settled(index)
    db = sqlite3.connect(tmp_path / "data" / "vaultd.db")
    for column in ("ctime_ns", "inode", "hashed_ns"):
        db.execute(f"ALTER TABLE notes DROP COLUMN {column}")
    db.execute("PRAGMA user_version = 8")
    db.commit()
    db.close()
    swap_word(tmp_path / "vault" / "a.md", "kelp", "reef")

    config = load_config(write_vault(tmp_path, {}), env={})
    with open_index(config, env={}) as index:
        first = index.indexer.reconcile()
        assert (first.notes_read, first.notes_changed, first.notes_checked) == (2, 1, 0)
        assert found(index, "reef") == ["a.md"]
        settled(index)  # the note edited just now is read once more, a tick later
    version = sqlite3.connect(tmp_path / "data" / "vaultd.db").execute("PRAGMA user_version")
    assert version.fetchone()[0] == SCHEMA_VERSION


def test_hourly_rescans_read_every_note_within_a_day() -> None:
    assert check_share(3600) == 1 / 24
    assert check_share(600) == 1 / 144
    assert check_share(2 * 86400) == 1.0


# -- a filesystem with 1-second timestamps, shimmed ----------------------------------------


def whole_seconds(ns: int) -> int:
    return ns - ns % S


def coarse_stat(st: os.stat_result) -> SimpleNamespace:
    """What a filesystem with 1-second timestamps (ext4 with 128-byte inodes, FAT, many
    network filesystems) reports: the times cut to whole seconds."""
    return SimpleNamespace(
        st_size=st.st_size,
        st_mtime_ns=whole_seconds(st.st_mtime_ns),
        st_ctime_ns=whole_seconds(st.st_ctime_ns),
        st_ino=st.st_ino,
        st_mode=st.st_mode,
    )


def coarse_clock(discovery: Discovery, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every stat the index takes one of a 1-second filesystem. A shim for machines
    that cannot mount one (tests/test_same_stat_edits.py uses a real one where it can)."""
    walk, state_of, read_note = discovery.walk, discovery.state_of, discovery.read_note

    def cut(state: FileState) -> FileState:
        return replace(
            state, mtime_ns=whole_seconds(state.mtime_ns), ctime_ns=whole_seconds(state.ctime_ns)
        )

    def coarse_walk() -> Iterator[FileState]:
        return (cut(s) for s in walk())

    def coarse_state_of(path: str) -> FileState | None:
        found = state_of(path)
        return None if found is None else cut(found)

    def coarse_read(path: str) -> tuple[bytes, Any]:
        data, st = read_note(path)
        return data, coarse_stat(st)

    monkeypatch.setattr(discovery, "walk", coarse_walk)
    monkeypatch.setattr(discovery, "state_of", coarse_state_of)
    monkeypatch.setattr(discovery, "read_note", coarse_read)


def test_two_saves_within_one_second_are_told_apart_on_a_coarse_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both saves have the same size, inode, mtime and ctime: only the racy rule (a stat
    recorded within a tick of the change proves nothing) has the second one read."""
    note = tmp_path / "vault" / "a.md"
    with indexed(tmp_path, NOTES, LONG_AGO) as index:
        coarse_clock(index.indexer.discovery, monkeypatch)
        settled(index)
        for _ in range(10):
            second = int(time.time()) + 1
            while time.time() < second:
                time.sleep(0.002)
            note.write_text("# A\n\nOtters float in dune.\n")
            index.indexer.reconcile_paths(["a.md"])
            note.write_text("# A\n\nOtters float in moss.\n")
            if int(time.time()) == second:
                break  # both saves, and the read between them, within one second
        else:
            pytest.skip("could not save, index and save again within one second here")
        assert found(index, "dune") == ["a.md"]
        summary = index.indexer.reconcile()
        assert (summary.notes_checked, summary.notes_changed) == (1, 1)
        assert found(index, "moss") == ["a.md"]
        assert found(index, "dune") == []
