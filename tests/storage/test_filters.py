"""storage/filters: tags (nested ones answer to their parents), folders, times, kinds and
frontmatter conditions; tag counts and recent notes."""

from __future__ import annotations

from tests.storage.outcomes import failed, left_out, source, written
from vaultd.query import Condition, Filters
from vaultd.storage import filters
from vaultd.storage.manifest import Manifest


def _write(manifest: Manifest, path: str, tags: list[str], mtime_ns: int = 1) -> None:
    manifest.notes.write(written(path, tags=tags, mtime_ns=mtime_ns), now=1.0)
    manifest.filters.write_tags(path, tags)


def test_tag_ancestors_include_every_parent() -> None:
    assert filters.tag_ancestors(["a/b/c", "d"]) == {"a", "a/b", "a/b/c", "d"}


def test_tag_counts_count_parents_and_keep_to_a_prefix(manifest: Manifest) -> None:
    _write(manifest, "1.md", ["proj/alpha", "misc"])
    _write(manifest, "2.md", ["proj/beta"])
    _write(manifest, "3.md", ["project"])

    assert manifest.filters.tag_counts() == [
        ("proj", 2),
        ("misc", 1),
        ("proj/alpha", 1),
        ("proj/beta", 1),
        ("project", 1),
    ]
    assert manifest.filters.tag_counts("proj") == [("proj", 2), ("proj/alpha", 1), ("proj/beta", 1)]
    manifest.filters.write_tags("1.md", ["misc"])
    manifest.filters.delete_tags("2.md")
    assert manifest.filters.tag_counts("proj") == []


def test_no_filter_is_none_and_each_filter_narrows(manifest: Manifest) -> None:
    _write(manifest, "a/one.md", ["x/y"], mtime_ns=10)
    _write(manifest, "a/two.md", ["z"], mtime_ns=20)
    _write(manifest, "ab/three.md", ["x"], mtime_ns=30)
    matching = manifest.filters.matching

    assert manifest.filters.matching(Filters()) is None
    assert matching(Filters(tags=("x",))) == ["a/one.md", "ab/three.md"]
    assert matching(Filters(tags=("x", "x/y"))) == ["a/one.md"]
    assert matching(Filters(tags_any=("z", "x/y"))) == ["a/one.md", "a/two.md"]
    assert matching(Filters(path_prefix="a/")) == ["a/one.md", "a/two.md"]
    assert matching(Filters(path_prefix="a/one.md")) == ["a/one.md"]
    assert matching(Filters(modified_since_ns=20)) == ["a/two.md", "ab/three.md"]
    assert matching(Filters(kinds=("pdf",))) == []
    assert matching(Filters(("x",), path_prefix="ab", kinds=("note",))) == ["ab/three.md"]


def test_filters_find_notes_that_keep_their_last_good_chunks(manifest: Manifest) -> None:
    for path in ("failed.md", "left.md", "ok.md"):
        _write(manifest, path, ["t"])
    manifest.failures.record_failure(failed("failed.md"), when=2.0)
    manifest.failures.record_left_out(left_out("left.md"), when=2.0)

    assert manifest.filters.matching(Filters(tags=("t",))) == ["failed.md", "left.md", "ok.md"]
    assert manifest.filters.tag_counts() == [("t", 3)]


def test_conditions_narrow_like_the_other_filters(manifest: Manifest) -> None:
    manifest.notes.write(written("a.md", frontmatter={"status": "done"}), now=1.0)
    manifest.notes.write(written("b.md", frontmatter={"status": "open"}), now=1.0)

    done = Condition("status", "eq", "done")
    assert manifest.filters.matching(Filters(where=(done,))) == ["a.md"]
    assert manifest.filters.matching(Filters(("b",), where=(done,))) == []


def test_recent_lists_the_newest_searchable_notes(manifest: Manifest) -> None:
    _write(manifest, "old.md", ["t"], mtime_ns=1)
    _write(manifest, "new.md", [], mtime_ns=5)

    assert manifest.filters.recent(10) == [
        {"path": "new.md", "title": "new", "mtime_ns": 5, "tags": []},
        {"path": "old.md", "title": "old", "mtime_ns": 1, "tags": ["t"]},
    ]
    assert [r["path"] for r in manifest.filters.recent(1)] == ["new.md"]
    assert [r["path"] for r in manifest.filters.recent(10, since_ns=2)] == ["new.md"]


def test_packages_keep_the_source_files_of_one_of_them_in_any_case(manifest: Manifest) -> None:
    manifest.notes.write(source("a/lib.rs", "Serde"), now=1.0)
    manifest.notes.write(source("b/index.ts", "@scope/b"), now=1.0)
    manifest.notes.write(source("c/main.go", None), now=1.0)
    manifest.notes.write(written("a/README.md"), now=1.0)
    matching = manifest.filters.matching

    assert matching(Filters(packages=("serde",))) == ["a/lib.rs"]
    assert matching(Filters(packages=("serde", "@scope/b"))) == [
        "a/lib.rs",
        "b/index.ts",
    ]
    assert matching(Filters(packages=("nothing",))) == []
    assert matching(Filters(path_prefix="a", packages=("@scope/b",))) == []


def test_exclusions_leave_out_tags_with_their_children_and_folders_with_their_notes(
    manifest: Manifest,
) -> None:
    _write(manifest, "a/one.md", ["x/y"])
    _write(manifest, "a/two.md", ["z"])
    _write(manifest, "ab/three.md", ["x"])
    matching = manifest.filters.matching

    assert matching(Filters(exclude_tags=("x",))) == ["a/two.md"]
    assert matching(Filters(exclude_tags=("x/y",))) == ["a/two.md", "ab/three.md"]
    # A folder is left out with everything under it, never a folder that only begins alike.
    assert matching(Filters(exclude_paths=("a/",))) == ["ab/three.md"]
    assert matching(Filters(exclude_paths=("a/one.md", "ab"))) == ["a/two.md"]
    assert matching(Filters(tags=("x",), exclude_paths=("ab",))) == ["a/one.md"]
