"""pipeline/discover/reading: opening a note as the rules admit it, never through a link the
walk would not follow."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from vaultd.errors import NoteUnavailableError
from vaultd.pipeline.discover.reading import NoteReader
from vaultd.pipeline.discover.rules import CompiledRules, IgnoreRules


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("hello\n")
    return root


def reader(root: Path, **given: object) -> NoteReader:
    return NoteReader(CompiledRules(root, IgnoreRules(**given)))  # type: ignore[arg-type]


def unavailable(read: NoteReader, rel: str) -> str:
    with pytest.raises(NoteUnavailableError) as caught:
        read.read_note(rel)
    return caught.value.kind


def test_reads_a_note_with_its_stat(vault: Path) -> None:
    data, info = reader(vault).read_note("sub/a.md")
    assert data == b"hello\n"
    assert info.st_ino == os.stat(vault / "sub" / "a.md").st_ino


def test_a_decomposed_name_on_disk_is_found_by_its_nfc_path(vault: Path) -> None:
    (vault / unicodedata.normalize("NFD", "café.md")).write_text("nfd\n")
    read = reader(vault)
    assert read.read_note(unicodedata.normalize("NFC", "café.md"))[0] == b"nfd\n"
    assert read.locate("nowhere/x.md") is None


def test_missing_excluded_and_too_big_notes_say_why(vault: Path) -> None:
    assert unavailable(reader(vault), "sub/none.md") == "missing"
    assert unavailable(reader(vault, exclude=("sub/",)), "sub/a.md") == "excluded"
    assert unavailable(reader(vault), ".obsidian/a.md") == "excluded"
    (vault / "big.md").write_bytes(b"x" * 2048)
    assert unavailable(reader(vault, max_file_mb=0.001), "big.md") == "too_big"


def test_a_link_is_never_followed_without_follow_symlinks(tmp_path: Path, vault: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    (vault / "out").symlink_to(outside)
    (vault / "note.md").symlink_to(outside / "secret.md")
    read = reader(vault)
    assert unavailable(read, "out/secret.md") == "link"
    assert unavailable(read, "note.md") == "link"
    assert not read.reachable(os.path.join(vault, "out", "secret.md"))


def test_with_follow_symlinks_links_stay_inside_the_vault(tmp_path: Path, vault: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret\n")
    (vault / "out").symlink_to(outside)
    (vault / "other").mkdir()
    (vault / "other" / "target.md").write_text("inside\n")
    (vault / "linked.md").symlink_to(vault / "other" / "target.md")
    read = reader(vault, follow_symlinks=True)
    assert unavailable(read, "out/secret.md") == "link"
    # The walk reaches the target under its own name, so the link is not a note of its own.
    assert unavailable(read, "linked.md") == "link"
    assert read.read_note("other/target.md")[0] == b"inside\n"
    assert read.link_verdict(str(vault / "out"), True) == "symlink points outside the vault"
    assert read.link_verdict(str(vault / "linked.md"), False) == "same file as other/target.md"


def test_a_folder_swapped_for_a_link_after_a_check_is_not_read(tmp_path: Path, vault: Path) -> None:
    read = reader(vault)
    assert read.read_note("sub/a.md")[0] == b"hello\n"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text("secret\n")
    os.rename(vault / "sub", tmp_path / "moved")
    (vault / "sub").symlink_to(outside)
    assert unavailable(read, "sub/a.md") == "link"


def test_a_fifo_is_not_a_note_and_does_not_hang(vault: Path) -> None:
    os.mkfifo(vault / "pipe.md")
    assert unavailable(reader(vault), "pipe.md") == "unreadable"
