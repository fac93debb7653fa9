from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import captured_logs
from vaultd.config import VaultSection
from vaultd.errors import VaultdError
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.records import FileState


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    path = tmp_path / "vault"
    path.mkdir()
    return path


def touch(root: Path, *paths: str, text: str = "# note\n") -> None:
    for rel in paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def found(root: Path, rules: IgnoreRules | None = None) -> list[str]:
    return [state.path for state in Discovery(root, rules or IgnoreRules()).walk()]


def test_walk_yields_file_states(vault: Path) -> None:
    touch(vault, "a.md", text="hello\n")
    [state] = list(Discovery(vault, IgnoreRules()).walk())
    st = os.stat(vault / "a.md")
    assert state == FileState(
        path="a.md", size=6, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns, inode=st.st_ino
    )


def test_walk_streams_and_is_sorted_per_directory(vault: Path) -> None:
    touch(vault, "b.md", "a/z.md", "a/b/c.md", "A.md", "c.md", "a.md")
    walk = Discovery(vault, IgnoreRules()).walk()
    assert isinstance(walk, Iterator)
    assert next(walk).path == "A.md"
    assert [s.path for s in walk] == ["a/b/c.md", "a/z.md", "a.md", "b.md", "c.md"]


# -- rule 1: regular .md files -------------------------------------------------------------


def test_only_markdown_files_any_case(vault: Path) -> None:
    touch(vault, "a.md", "B.MD", "c.Md", "d.markdown", "e.txt", "f.md.bak", "img.png", "md")
    os.mkfifo(vault / "pipe.md")
    (vault / "dir.md").mkdir()
    touch(vault, "dir.md/inner.md")
    assert found(vault) == ["B.MD", "a.md", "c.Md", "dir.md/inner.md"]


# -- rule 2: always-skipped directories and dot-files --------------------------------------


def test_dot_entries_and_node_modules_are_skipped(vault: Path) -> None:
    touch(
        vault,
        ".obsidian/workspace.md",
        ".trash/old.md",
        ".git/x.md",
        ".hidden.md",
        "sub/.secret/x.md",
        "node_modules/pkg/readme.md",
        "sub/node_modules/readme.md",
        "kept.md",
    )
    assert found(vault) == ["kept.md"]


# -- rule 3: editor temp files -------------------------------------------------------------


def test_editor_temp_and_swap_files_are_skipped(vault: Path) -> None:
    touch(
        vault,
        "note.md",
        "note.md~",
        ".note.md.swp",
        "note.md.swp",
        "note.md.swo",
        "note.md.swx",
        "note.md.tmp",
        "4913",
        ".#note.md",
        "#note.md#",
        "~$note.md",
        ".syncthing.note.md.tmp",
        ".DS_Store",
    )
    assert found(vault) == ["note.md"]


# -- rule 4: sync conflict copies ----------------------------------------------------------

CONFLICTS = [
    "Plan (John's conflicted copy 2024-01-02).md",
    "Plan (conflicted copy 2024-01-02 123456).md",
    "Plan (Case Conflict).md",
    "Plan (Case Conflict 1).md",
    "Plan.sync-conflict-20240102-123456-ABCDEFG.md",
    "Plan 2.md",
    "Plan 13.md",
]


def test_conflict_copies_are_skipped(vault: Path) -> None:
    touch(vault, "Plan.md", *CONFLICTS)
    assert found(vault) == ["Plan.md"]
    discovery = Discovery(vault, IgnoreRules())
    assert all(discovery.is_ignored(name) for name in CONFLICTS)


def test_numbered_note_without_original_is_kept(vault: Path) -> None:
    touch(vault, "Chapter 2.md", "Chapter 1.md", "Other/Plan 2.md", "Plan.md")
    assert found(vault) == ["Chapter 1.md", "Chapter 2.md", "Other/Plan 2.md", "Plan.md"]
    assert not Discovery(vault, IgnoreRules()).is_ignored("Chapter 2.md")


def test_conflict_copies_kept_when_not_skipping(vault: Path) -> None:
    touch(vault, "Plan.md", *CONFLICTS)
    assert len(found(vault, IgnoreRules(skip_conflicts=False))) == len(CONFLICTS) + 1


# -- rule 5: .gitignore and .ignore --------------------------------------------------------


def test_gitignore_files_root_and_nested(vault: Path) -> None:
    touch(vault, ".gitignore", text="build/\n*.draft.md\n!keep.draft.md\n")
    touch(vault, "sub/.gitignore", text="local.md\n/anchored.md\n")
    touch(
        vault,
        "a.md",
        "x.draft.md",
        "keep.draft.md",
        "build/out.md",
        "sub/local.md",
        "sub/anchored.md",
        "sub/deeper/anchored.md",
        "sub/deeper/local.md",
        "local.md",
        "sub/y.draft.md",
    )
    assert found(vault) == [
        "a.md",
        "keep.draft.md",
        "local.md",
        "sub/deeper/anchored.md",
    ]


def test_nested_ignore_file_can_negate_a_parent_pattern(vault: Path) -> None:
    touch(vault, ".gitignore", text="*.private.md\n")
    touch(vault, "shared/.gitignore", text="!*.private.md\n")
    touch(vault, "a.private.md", "shared/b.private.md")
    assert found(vault) == ["shared/b.private.md"]


def test_dot_ignore_overrides_gitignore(vault: Path) -> None:
    touch(vault, ".gitignore", text="*.md\n")
    touch(vault, ".ignore", text="!wanted.md\n")
    touch(vault, "wanted.md", "other.md")
    assert found(vault) == ["wanted.md"]


def test_excluded_directory_cannot_be_reincluded(vault: Path) -> None:
    # As in git: once a directory is ignored, nothing under it comes back.
    touch(vault, ".gitignore", text="archive/\n!archive/keep.md\n")
    touch(vault, "archive/keep.md")
    assert found(vault) == []
    assert Discovery(vault, IgnoreRules()).is_ignored("archive/keep.md")


def test_gitignore_not_used_when_disabled(vault: Path) -> None:
    touch(vault, ".gitignore", text="*.md\n")
    touch(vault, "a.md")
    assert found(vault, IgnoreRules(use_gitignore=False)) == ["a.md"]


def test_invalid_gitignore_lines_are_dropped(vault: Path) -> None:
    touch(vault, ".gitignore", text="!\n\\\nb.md\n")
    touch(vault, "a.md", "b.md")
    assert found(vault) == ["a.md"]


def test_unreadable_ignore_file_is_reported_on_each_walk(vault: Path) -> None:
    (vault / "sub" / ".gitignore").mkdir(parents=True)  # stat works, reading does not
    touch(vault, "sub/a.md")
    discovery = Discovery(vault, IgnoreRules())
    for _ in range(2):
        assert [s.path for s in discovery.walk()] == ["sub/a.md"]
        assert discovery.skipped == [("sub/.gitignore", "cannot read: Is a directory")]
    assert not discovery.is_ignored("sub/a.md")
    assert len(discovery.skipped) == 1


def test_changed_ignore_file_is_picked_up(vault: Path) -> None:
    touch(vault, "a.md")
    discovery = Discovery(vault, IgnoreRules())
    assert not discovery.is_ignored("a.md")
    touch(vault, ".gitignore", text="a.md\n")
    assert discovery.is_ignored("a.md")
    assert list(discovery.walk()) == []
    touch(vault, ".gitignore", text="other-name.md\n")
    assert not discovery.is_ignored("a.md")


# -- rule 6: exclude and include -----------------------------------------------------------


def test_exclude_globs(vault: Path) -> None:
    touch(vault, "Templates/t.md", "sub/Templates/t.md", "x.excalidraw.md", "keep/a.md")
    rules = IgnoreRules(exclude=("/Templates/", "*.excalidraw.md"))
    assert found(vault, rules) == ["keep/a.md", "sub/Templates/t.md"]


def test_include_globs_limit_notes(vault: Path) -> None:
    touch(vault, "Notes/a.md", "Notes/deep/b.md", "Journal/c.md", "d.md")
    assert found(vault, IgnoreRules(include=("Notes/",))) == ["Notes/a.md", "Notes/deep/b.md"]
    assert found(vault, IgnoreRules(include=("Journal/*.md", "d.md"))) == ["Journal/c.md", "d.md"]


def test_exclude_beats_include(vault: Path) -> None:
    touch(vault, "Notes/a.md", "Notes/private/b.md")
    rules = IgnoreRules(include=("Notes/**",), exclude=("private/",))
    assert found(vault, rules) == ["Notes/a.md"]


# -- rule 7: symlinks ----------------------------------------------------------------------


def test_symlinks_are_not_followed_by_default(vault: Path, tmp_path: Path) -> None:
    touch(vault, "real/a.md")
    (vault / "link.md").symlink_to(vault / "real" / "a.md")
    (vault / "linkdir").symlink_to(vault / "real")
    discovery = Discovery(vault, IgnoreRules())
    assert [s.path for s in discovery.walk()] == ["real/a.md"]
    assert discovery.skipped == []


def test_followed_symlinks_stay_inside_the_vault(vault: Path, tmp_path: Path) -> None:
    touch(tmp_path, "outside/secret.md", "outside.md")
    touch(vault, "a.md")
    (vault / "out-file.md").symlink_to(tmp_path / "outside.md")
    (vault / "out-dir").symlink_to(tmp_path / "outside")
    (vault / "dangling.md").symlink_to(vault / "missing.md")

    discovery = Discovery(vault, IgnoreRules(follow_symlinks=True))
    assert [s.path for s in discovery.walk()] == ["a.md"]
    assert sorted(discovery.skipped) == [
        ("out-dir/", "symlink points outside the vault"),
        ("out-file.md", "symlink points outside the vault"),
    ]


def test_followed_symlinks_reach_ignored_places(vault: Path) -> None:
    touch(vault, "Hidden/h.md", ".stash/s.md")
    (vault / "shown").symlink_to(vault / "Hidden")
    (vault / "alias.md").symlink_to(vault / ".stash" / "s.md")
    rules = IgnoreRules(exclude=("Hidden/",), follow_symlinks=True)
    assert found(vault, rules) == ["alias.md", "shown/h.md"]
    assert found(vault, IgnoreRules(exclude=("Hidden/",))) == []


def test_followed_symlink_loops_are_cut(vault: Path) -> None:
    touch(vault, "a/note.md")
    (vault / "a" / "loop").symlink_to(vault / "a")
    (vault / "self.md").symlink_to(vault / "self.md")

    discovery = Discovery(vault, IgnoreRules(follow_symlinks=True))
    assert [s.path for s in discovery.walk()] == ["a/note.md"]
    assert sorted(discovery.skipped) == [("a/loop/", "symlink loop"), ("self.md", "symlink loop")]


def test_followed_symlinks_do_not_index_a_note_twice(vault: Path) -> None:
    touch(vault, "b/note.md", ".store/s.md")
    (vault / "a").symlink_to(vault / "b")
    (vault / "a-note.md").symlink_to(vault / "b" / "note.md")
    (vault / "l1").symlink_to(vault / ".store")
    (vault / "l2").symlink_to(vault / ".store")

    discovery = Discovery(vault, IgnoreRules(follow_symlinks=True))
    # The real name wins over a link, whichever sorts first; of two links, the first.
    assert [s.path for s in discovery.walk()] == ["b/note.md", "l1/s.md"]
    assert discovery.skipped == [
        ("a/", "same directory as b/"),
        ("a-note.md", "same file as b/note.md"),
        ("l2/", "same directory as l1/"),
    ]


# -- rule 8: size --------------------------------------------------------------------------


def test_big_files_are_skipped_and_reported(vault: Path) -> None:
    touch(vault, "small.md", text="x" * 1000)
    touch(vault, "big.md", text="x" * 3000)
    discovery = Discovery(vault, IgnoreRules(max_file_mb=0.002))  # 2097 bytes
    assert [s.path for s in discovery.walk()] == ["small.md"]
    assert discovery.skipped == [("big.md", "larger than the 0.002 MB limit (0.0 MB)")]


def test_from_config_carries_every_setting() -> None:
    section = VaultSection(
        exclude=("a",),
        include=("b",),
        follow_symlinks=True,
        skip_conflicts=False,
        use_gitignore=False,
        max_file_mb=1.5,
    )
    assert IgnoreRules.from_config(section) == IgnoreRules(
        exclude=("a",),
        include=("b",),
        follow_symlinks=True,
        skip_conflicts=False,
        use_gitignore=False,
        max_file_mb=1.5,
    )


# -- rule 9: names that are not UTF-8 ------------------------------------------------------


def test_non_utf8_names_are_skipped_and_reported(vault: Path) -> None:
    raw = os.fsencode(vault)
    for name in (b"caf\xe9.md", b"ok.md", b"caf\xe9.txt"):
        with open(os.path.join(raw, name), "w") as fh:
            fh.write("x")
    os.mkdir(os.path.join(raw, b"dir\xff"))
    with open(os.path.join(raw, b"dir\xff", b"inner.md"), "w") as fh:
        fh.write("x")

    discovery = Discovery(vault, IgnoreRules())
    assert [s.path for s in discovery.walk()] == ["ok.md"]
    assert sorted(discovery.skipped) == [
        ("caf\\xe9.md", "file name is not valid UTF-8"),
        ("dir\\xff/", "file name is not valid UTF-8"),
    ]
    assert discovery.is_ignored(os.fsdecode(b"caf\xe9.md"))


def test_non_utf8_names_met_by_the_watcher_are_reported_as_the_walk_reports_them(
    vault: Path,
) -> None:
    raw = os.fsencode(vault)
    for name in (b"caf\xe9.md", b"caf\xe9.txt", b".caf\xe9.md", b"ok.md"):
        with open(os.path.join(raw, name), "w") as fh:
            fh.write("x")
    os.mkdir(os.path.join(raw, b"dir\xff"))
    with open(os.path.join(raw, b"dir\xff", b"inner.md"), "w") as fh:
        fh.write("x")
    os.symlink(os.path.join(raw, b"ok.md"), os.path.join(raw, b"link\xe9.md"))
    reason = "file name is not valid UTF-8"
    live = Discovery(vault, IgnoreRules())
    with captured_logs() as logs:
        live.report_undecodable(
            os.fsdecode(name)
            for name in (
                b"caf\xe9.md",
                b"caf\xe9.txt",
                b".caf\xe9.md",
                b"dir\xff/inner.md",
                b"link\xe9.md",
                b"gone\xe9.md",
            )
        )
        live.report_undecodable([os.fsdecode(b"caf\xe9.md")])  # once is enough
    walked = Discovery(vault, IgnoreRules())
    list(walked.walk())
    assert (
        sorted(live.skipped)
        == sorted(walked.skipped)
        == [
            ("caf\\xe9.md", reason),
            ("dir\\xff/", reason),
        ]
    )
    assert sorted(e["path"] for e in logs if e["event"] == "not indexed") == [
        "caf\\xe9.md",
        "dir\\xff/",
    ]

    os.remove(os.path.join(raw, b"caf\xe9.md"))
    live.report_undecodable([os.fsdecode(b"caf\xe9.md")])
    assert live.skipped == [("dir\\xff/", reason)]


# -- permission denied ---------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads directories whatever their mode")
def test_unreadable_directory_is_reported_and_walk_goes_on(vault: Path) -> None:
    touch(vault, "a.md", "locked/b.md", "z.md")
    (vault / "locked").chmod(0)
    try:
        discovery = Discovery(vault, IgnoreRules())
        assert [s.path for s in discovery.walk()] == ["a.md", "z.md"]
        assert discovery.skipped == [("locked/", "permission denied")]
    finally:
        (vault / "locked").chmod(0o755)


def test_permission_error_while_listing_is_reported(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Runs as root too, where chmod cannot make a directory unreadable.
    touch(vault, "a.md", "locked/b.md", "z.md")
    real_scandir = os.scandir
    locked = str(vault / "locked")

    def scandir(path: str) -> Iterator[os.DirEntry[str]]:
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    discovery = Discovery(vault, IgnoreRules())
    assert [s.path for s in discovery.walk()] == ["a.md", "z.md"]
    assert discovery.skipped == [("locked/", "permission denied")]


def test_missing_root_raises(tmp_path: Path) -> None:
    with pytest.raises(VaultdError, match="cannot read the vault"):
        list(Discovery(tmp_path / "gone", IgnoreRules()).walk())


def test_skipped_is_reset_by_each_walk(vault: Path) -> None:
    touch(vault, "big.md", text="x" * 3000)
    discovery = Discovery(vault, IgnoreRules(max_file_mb=0.001))
    list(discovery.walk())
    list(discovery.walk())
    assert len(discovery.skipped) == 1


# -- Unicode normalisation -----------------------------------------------------------------


def test_paths_are_nfc(vault: Path) -> None:
    decomposed = unicodedata.normalize("NFD", "Café/Résumé.md")
    touch(vault, decomposed)
    [path] = found(vault)
    assert path == unicodedata.normalize("NFC", "Café/Résumé.md")
    assert path != decomposed


def test_rules_match_decomposed_names(vault: Path) -> None:
    touch(vault, unicodedata.normalize("NFD", "Café.md"), "b.md")
    assert found(vault, IgnoreRules(exclude=("Café.md",))) == ["b.md"]


def test_two_spellings_of_one_name_yield_one_path(vault: Path) -> None:
    touch(vault, unicodedata.normalize("NFC", "é.md"), unicodedata.normalize("NFD", "é.md"))
    discovery = Discovery(vault, IgnoreRules())
    assert [s.path for s in discovery.walk()] == ["é.md"]
    assert discovery.skipped == [
        ("é.md", "another file has the same name after Unicode normalisation")
    ]


# -- is_ignored agrees with the walk -------------------------------------------------------


def test_is_ignored_agrees_with_walk(vault: Path) -> None:
    touch(vault, ".gitignore", text="drafts/\n")
    touch(vault, "sub/.ignore", text="*.tmp.md\n")
    paths = [
        "a.md",
        "a.txt",
        ".obsidian/x.md",
        "drafts/x.md",
        "sub/x.tmp.md",
        "sub/y.md",
        "sub/deep/z.md",
        "node_modules/m.md",
        "Templates/t.md",
        "Plan.md",
        "Plan 2.md",
        "Solo 2.md",
        "x.md~",
        unicodedata.normalize("NFD", "Résumé.md"),
    ]
    touch(vault, *paths)
    rules = IgnoreRules(exclude=("Templates/",))
    discovery = Discovery(vault, rules)
    walked = set(found(vault, rules))
    for rel in paths:
        nfc = unicodedata.normalize("NFC", rel)
        assert discovery.is_ignored(rel) == (nfc not in walked), rel


def test_is_ignored_for_directories(vault: Path) -> None:
    discovery = Discovery(vault, IgnoreRules(exclude=("Archive/",)))
    assert discovery.is_ignored(".obsidian", is_dir=True)
    assert discovery.is_ignored("Archive", is_dir=True)
    assert discovery.is_ignored("Archive/sub/x.md")
    assert not discovery.is_ignored("Notes", is_dir=True)
    assert not discovery.is_ignored("", is_dir=True)
    assert discovery.is_ignored("")
