"""storage/filters: tags (nested ones answer to their parents), folders, times, kinds and
frontmatter conditions; tag counts and recent notes."""

from __future__ import annotations

import sqlite3

from tests.storage.outcomes import failed, left_out, source, written
from vaultd.query import Condition
from vaultd.storage import filters, notes, quarantine
from vaultd.storage.schema import Query


def _write(db: sqlite3.Connection, path: str, tags: list[str], mtime_ns: int = 1) -> None:
    notes.write(db, written(path, tags=tags, mtime_ns=mtime_ns), now=1.0)
    filters.write_tags(db, path, tags)


def test_tag_ancestors_include_every_parent() -> None:
    assert filters.tag_ancestors(["a/b/c", "d"]) == {"a", "a/b", "a/b/c", "d"}


def test_tag_counts_count_parents_and_keep_to_a_prefix(
    db: sqlite3.Connection, query: Query
) -> None:
    _write(db, "1.md", ["proj/alpha", "misc"])
    _write(db, "2.md", ["proj/beta"])
    _write(db, "3.md", ["project"])

    assert filters.tag_counts(query) == [
        ("proj", 2),
        ("misc", 1),
        ("proj/alpha", 1),
        ("proj/beta", 1),
        ("project", 1),
    ]
    assert filters.tag_counts(query, "proj") == [("proj", 2), ("proj/alpha", 1), ("proj/beta", 1)]
    filters.write_tags(db, "1.md", ["misc"])
    filters.delete_tags(db, "2.md")
    assert filters.tag_counts(query, "proj") == []


def test_no_filter_is_none_and_each_filter_narrows(db: sqlite3.Connection, query: Query) -> None:
    _write(db, "a/one.md", ["x/y"], mtime_ns=10)
    _write(db, "a/two.md", ["z"], mtime_ns=20)
    _write(db, "ab/three.md", ["x"], mtime_ns=30)

    assert filters.paths_matching(query) is None
    assert filters.paths_matching(query, ["x"]) == ["a/one.md", "ab/three.md"]
    assert filters.paths_matching(query, ["x", "x/y"]) == ["a/one.md"]
    assert filters.paths_matching(query, tags_any=["z", "x/y"]) == ["a/one.md", "a/two.md"]
    assert filters.paths_matching(query, path_prefix="a/") == ["a/one.md", "a/two.md"]
    assert filters.paths_matching(query, path_prefix="a/one.md") == ["a/one.md"]
    assert filters.paths_matching(query, modified_since_ns=20) == ["a/two.md", "ab/three.md"]
    assert filters.paths_matching(query, kinds=["pdf"]) == []
    assert filters.paths_matching(query, ["x"], "ab", kinds=["note"]) == ["ab/three.md"]


def test_filters_find_notes_that_keep_their_last_good_chunks(
    db: sqlite3.Connection, query: Query
) -> None:
    for path in ("failed.md", "left.md", "ok.md"):
        _write(db, path, ["t"])
    quarantine.record_failure(db, failed("failed.md"), quarantine_after=0, when=2.0)
    quarantine.record_left_out(db, left_out("left.md"), when=2.0)

    assert filters.paths_matching(query, ["t"]) == ["failed.md", "left.md", "ok.md"]
    assert filters.tag_counts(query) == [("t", 3)]


def test_conditions_narrow_like_the_other_filters(db: sqlite3.Connection, query: Query) -> None:
    notes.write(db, written("a.md", frontmatter={"status": "done"}), now=1.0)
    notes.write(db, written("b.md", frontmatter={"status": "open"}), now=1.0)

    done = Condition("status", "eq", "done")
    assert filters.paths_matching(query, conditions=[done]) == ["a.md"]
    assert filters.paths_matching(query, "b", conditions=[done]) == []


def test_recent_lists_the_newest_searchable_notes(db: sqlite3.Connection, query: Query) -> None:
    _write(db, "old.md", ["t"], mtime_ns=1)
    _write(db, "new.md", [], mtime_ns=5)

    assert filters.recent(query, 10) == [
        {"path": "new.md", "title": "new", "mtime_ns": 5, "tags": []},
        {"path": "old.md", "title": "old", "mtime_ns": 1, "tags": ["t"]},
    ]
    assert [r["path"] for r in filters.recent(query, 1)] == ["new.md"]
    assert [r["path"] for r in filters.recent(query, 10, since_ns=2)] == ["new.md"]


def test_packages_keep_the_source_files_of_one_of_them_in_any_case(
    db: sqlite3.Connection, query: Query
) -> None:
    notes.write(db, source("a/lib.rs", "Serde"), now=1.0)
    notes.write(db, source("b/index.ts", "@scope/b"), now=1.0)
    notes.write(db, source("c/main.go", None), now=1.0)
    notes.write(db, written("a/README.md"), now=1.0)

    assert filters.paths_matching(query, packages=["serde"]) == ["a/lib.rs"]
    assert filters.paths_matching(query, packages=["serde", "@scope/b"]) == [
        "a/lib.rs",
        "b/index.ts",
    ]
    assert filters.paths_matching(query, packages=["nothing"]) == []
    assert filters.paths_matching(query, "", "a", packages=["@scope/b"]) == []
