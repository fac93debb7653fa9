"""index/extract: a file's kind from its name or the code globs, and the note each kind's
extractor makes of real bytes (a PDF read by PDFium in the worker process)."""

from __future__ import annotations

import json

import pytest

from tests.test_attachments import make_pdf
from vaultd.errors import LeftOutError, NoteError
from vaultd.index.extract import Extraction, extract_note, turned_off
from vaultd.isolation import close_children


def test_the_kind_comes_from_the_name_or_the_code_globs() -> None:
    plain, with_code = Extraction(), Extraction(code=("scripts/*.py",))
    assert [plain.kind(p) for p in ("a.md", "b.canvas", "c.pdf", "d.png")] == [
        "note",
        "canvas",
        "pdf",
        "image",
    ]
    assert plain.kind("scripts/x.py") == "note"
    assert with_code.kind("scripts/x.py") == "code"
    assert with_code.kind("other/x.py") == "note"


def test_a_markdown_note_is_parsed() -> None:
    note = extract_note("a.md", b"---\ntags: [sea]\n---\n# Keeper\n\nSee [[Pier]].\n")
    assert (note.kind, note.tags) == ("note", ("sea",))
    assert [link.target for link in note.links] == ["Pier"]


def test_a_canvas_card_gives_its_text_and_links() -> None:
    board = {"nodes": [{"id": "a", "type": "text", "text": "Tides and [[Pier]]", "x": 0, "y": 0,
                        "width": 10, "height": 10}], "edges": []}  # fmt: skip
    note = extract_note("board.canvas", json.dumps(board).encode())
    assert note.kind == "canvas"
    assert "Tides and" in note.body
    assert [link.target for link in note.links] == ["Pier"]


def test_source_code_is_read_as_code() -> None:
    note = extract_note(
        "tool.py", b"def climb(stairs):\n    return stairs\n", extraction=Extraction(code=("*.py",))
    )
    assert note.kind == "code"
    assert "def climb" in note.body


def test_a_pdf_is_read_in_the_worker() -> None:
    try:
        note = extract_note("paper.pdf", make_pdf(["The lighthouse page", "The harbour page"]))
    finally:
        close_children()  # the worker is kept for the next file: none outlives the test
    assert note.kind == "pdf"
    assert "lighthouse page" in note.body and "harbour page" in note.body


def test_files_over_the_cap_or_of_no_text_are_left_out() -> None:
    with pytest.raises(LeftOutError) as raised:
        extract_note("big.canvas", b"{}" * 100, max_bytes=10)
    assert raised.value.kind == "too_big"
    with pytest.raises(NoteError):
        extract_note("bad.canvas", b'{"nodes": [')
    assert "ocr = false" in turned_off("image")
