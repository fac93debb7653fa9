"""pipeline/discover/rules: which vault paths name files vaultd reads, judged by name and the
ignore files on the way."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from vaultd.pipeline.discover.rules import CompiledRules, IgnoreRules, is_utf8, nfc, printable

_MB = 1024 * 1024


def rules(root: Path, **given: object) -> CompiledRules:
    return CompiledRules(root, IgnoreRules(**given))  # type: ignore[arg-type]


def test_only_the_kinds_indexed_are_notes(tmp_path: Path) -> None:
    compiled = rules(tmp_path, kinds=frozenset({"note", "excalidraw"}), code=("*.py",))
    assert not compiled.is_ignored("a.md")
    assert not compiled.is_ignored("A.MD")
    assert compiled.is_ignored("a.txt")
    assert compiled.is_ignored("x.pdf")  # PDFs only when [attachments] says so
    assert compiled.kind("x.pdf") == "pdf"
    assert compiled.kind("src/tool.py") == "code"
    assert compiled.kind("notes.txt") == "other"


def test_dot_paths_node_modules_and_temp_files_are_left_out(tmp_path: Path) -> None:
    compiled = rules(tmp_path)
    for rel in (".obsidian/a.md", ".hidden.md", "node_modules/a.md", "~$note.md", ".#a.md"):
        assert compiled.is_ignored(rel), rel
    assert compiled.is_ignored("node_modules", is_dir=True)
    assert not compiled.is_ignored("modules/a.md")


def test_conflict_copies_only_with_skip_conflicts(tmp_path: Path) -> None:
    (tmp_path / "Chapter.md").write_text("x")
    compiled = rules(tmp_path)
    assert compiled.is_ignored("a (Bob's conflicted copy 2024-01-01).md")
    assert compiled.is_ignored("a.sync-conflict-20240101-120000-ABCDEF7.md")
    # iCloud's "x 2.md" is a copy only beside "x.md"; alone it is a real note.
    assert compiled.is_ignored("Chapter 2.md")
    assert not compiled.is_ignored("Lesson 2.md")
    assert not rules(tmp_path, skip_conflicts=False).is_ignored("Chapter 2.md")


def test_ignore_files_apply_below_their_folder_and_deeper_ones_win(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".gitignore").write_text("drafts/\n*.tmp.md\n")
    (tmp_path / "sub" / ".ignore").write_text("!keep.tmp.md\nlocal.md\n")
    compiled = rules(tmp_path)
    assert compiled.is_ignored("drafts/a.md")
    assert compiled.is_ignored("x.tmp.md")
    assert not compiled.is_ignored("sub/keep.tmp.md")
    assert compiled.is_ignored("sub/local.md")
    assert not compiled.is_ignored("local.md")
    assert not rules(tmp_path, use_gitignore=False).is_ignored("drafts/a.md")


def test_an_ignore_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    ignore = tmp_path / ".gitignore"
    ignore.write_text("a.md\n")
    compiled = rules(tmp_path)
    assert compiled.is_ignored("a.md")
    ignore.write_text("b.md\n# now longer\n")
    assert not compiled.is_ignored("a.md")
    assert compiled.is_ignored("b.md")


def test_a_bad_ignore_line_is_dropped_not_fatal(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("a.md\n[\n")
    assert rules(tmp_path).is_ignored("a.md")


def test_exclude_beats_include_and_include_filters_notes_only(tmp_path: Path) -> None:
    compiled = rules(tmp_path, include=("work/**",), exclude=("work/private/",))
    assert not compiled.is_ignored("work/a.md")
    assert compiled.is_ignored("work/private/a.md")
    assert compiled.is_ignored("home/a.md")
    assert not compiled.is_ignored("home", is_dir=True)


def test_names_are_matched_in_nfc_and_must_be_utf8(tmp_path: Path) -> None:
    compiled = rules(tmp_path, exclude=("café.md",))
    assert compiled.is_ignored(unicodedata.normalize("NFD", "café.md"))
    assert nfc(unicodedata.normalize("NFD", "é")) == "é"
    undecodable = os.fsdecode(b"bad\xff.md")
    assert not is_utf8(undecodable)
    assert compiled.is_ignored(undecodable)
    assert printable(undecodable) == "bad\\xff.md"


def test_size_caps_by_kind(tmp_path: Path) -> None:
    compiled = rules(tmp_path, max_file_mb=2.0, kind_caps_mb=(("pdf", 10.0),))
    assert compiled.cap("a.md") == 2 * _MB
    assert compiled.cap("a.pdf") == 10 * _MB
    assert compiled.too_big_reason(3 * _MB, "a.md") == "larger than the 2 MB limit (3.0 MB)"
