"""index/preview: what would be indexed of one file, without an index (`vaultd inspect`):
read under the indexer's cap, parsed and chunked with the model's own tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vaultd.config import load_config
from vaultd.errors import LeftOutError, NotAFileError
from vaultd.index.preview import note_path, preview_file, read_capped, render_text


def test_a_note_is_previewed_as_indexing_would_read_it(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    (vault / "sea").mkdir(parents=True)
    note = vault / "sea" / "a.md"
    note.write_text("---\ntags: [coast]\n---\n# Keeper\n\nThe keeper climbs [[Stairs]].\n")
    config = tmp_path / "c.toml"
    config.write_text(f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n')

    report = preview_file(note, load_config(config, env={}))

    assert (report["path"], report["kind"], report["tags"]) == ("sea/a.md", "note", ["coast"])
    assert [link["target"] for link in report["links"]] == ["Stairs"]
    assert len(report["chunks"]) == 1 and "climbs" in report["chunks"][0]["text"]
    assert "sea/a.md" in render_text(report)


def test_a_path_outside_the_vault_is_named_by_its_file_name(tmp_path: Path) -> None:
    (tmp_path / "v").mkdir()
    assert note_path(tmp_path / "v" / "x" / "n.md", tmp_path / "v") == "x/n.md"
    assert note_path(tmp_path / "elsewhere.md", tmp_path / "v") == "elsewhere.md"
    assert note_path(tmp_path / "n.md", None) == "n.md"


def test_only_a_regular_file_under_the_cap_is_read(tmp_path: Path) -> None:
    small = tmp_path / "small.md"
    small.write_bytes(b"12345")
    assert read_capped(small, 5) == b"12345"
    with pytest.raises(LeftOutError) as raised:
        read_capped(small, 4)
    assert raised.value.kind == "too_big"
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    with pytest.raises(NotAFileError):
        read_capped(fifo, 5)
