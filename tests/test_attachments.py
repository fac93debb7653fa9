"""Canvases, Excalidraw drawings and PDFs: found by their text with where they are, linked,
counted by kind, updated incrementally, and left out with their reason when they are bad.

Real files: a PDF manual and the JSON Canvas sample of the shared corpus, and small PDFs and
canvases written here (`make_pdf` writes a real PDF, read by the real PDFium).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.convergence import assert_same, fresh_export
from harness.mutations import mutated
from tests.conftest import shared_path
from vaultd.answers import Hit
from vaultd.config import load_config
from vaultd.doctor.vault import check_vault
from vaultd.errors import LeftOutError
from vaultd.index.export import export_records
from vaultd.index.extract import Extraction, extract_note
from vaultd.index.links import resolve_links
from vaultd.index.open import Index, open_index
from vaultd.index.status import index_status
from vaultd.isolation import close_children
from vaultd.pipeline import pdf
from vaultd.query import SearchQuery
from vaultd.records import Location

LOCATION_COLUMNS = ("page", "page_end", "node", "symbol")

#: The real PDF the page test reads (two pages of asymptote-doc), and the page of it whose
#: sentence is searched for; the PDF whose outline is read, and the one mutated.
MANUAL = "TeXShopAndAsymptote.pdf"
PAGE = 2
OUTLINED = "asymptote.pdf"
MUTATED = "asyRefCard.pdf"
DRAWING_DATA = "N4KAkARALgngDgUwgLgAQQQDwMYEMA2AlgCYBOuA7hADTgQBuCpAzoQPYB2KqATLZMzYBXUtiRoIACyhQ4"


def make_pdf(pages: list[str], *, encrypt: bool = False) -> bytes:
    """A real PDF with one page per text (Helvetica, one line per line); with `encrypt`, one
    that opens only with a password (a Standard security handler no empty password fits)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (" ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages))).encode(), len(pages)),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        shown = [
            "(" + line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ") Tj T*"
            for line in text.split("\n")
        ]
        stream = "\n".join(["BT /F1 11 Tf 14 TL 56 780 Td", *shown, "ET"]).encode("latin-1")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    if encrypt:
        objects.append(
            b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>" % (b"11" * 32, b"22" * 32)
        )
    extra = b" /Encrypt %d 0 R /ID [<%s> <%s>]" % (len(objects), b"ab" * 16, b"ab" * 16)
    return pdf_file(objects, extra if encrypt else b"")


def pdf_file(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF of these objects, numbered from 1 (the first the catalog), with its cross-reference
    table; `trailer` adds to the trailer's dictionary."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        trailer,
        xref,
    )
    return bytes(out)


def canvas(cards: list[dict[str, Any]], edges: list[dict[str, Any]] = ()) -> str:  # type: ignore[assignment]
    return json.dumps({"nodes": cards, "edges": list(edges)}, indent="\t")


BOARD = [
    {"id": "birds", "type": "group", "label": "Birds", "x": 0, "y": 0, "width": 900, "height": 500},
    {
        "id": "card-kestrel",
        "type": "text",
        "text": "Kestrels hover above motorway verges, hunting voles in the long grass.",
        "x": 20,
        "y": 40,
        "width": 300,
        "height": 120,
    },
    {
        "id": "plan",
        "type": "file",
        "file": "notes/Plan.md",
        "x": 400,
        "y": 40,
        "width": 300,
        "height": 300,
    },
    {
        "id": "web",
        "type": "link",
        "url": "https://example.org/raptors",
        "x": 0,
        "y": 700,
        "width": 200,
        "height": 80,
    },
]

EXCALIDRAW_MD = f"""---
excalidraw-plugin: parsed
tags: [excalidraw]
---
==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS menu of this document. ⚠==

# Excalidraw Data

## Text Elements
Quokka selfie spot by the ferry pier ^quokka01

Bring the wide lens
for [[Plan]] ^lens0002

%%
## Drawing
```compressed-json
{DRAWING_DATA}
```
%%
"""

EXCALIDRAW_JSON = json.dumps(
    {
        "type": "excalidraw",
        "elements": [
            {
                "id": "ax1",
                "type": "text",
                "text": "Axolotl tank layout, filter on the left",
                "x": 5,
                "y": 5,
            },
            {
                "id": "gone",
                "type": "text",
                "text": "Deleted words",
                "isDeleted": True,
                "x": 0,
                "y": 0,
            },
            {"id": "r1", "type": "rectangle", "x": 0, "y": 0},
        ],
    }
)


def config_for(root: Path, vault: Path, extra: str = "") -> Path:
    path = root / "c.toml"
    path.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n[log]\nlevel = "error"\n'
        + extra,
        encoding="utf-8",
    )
    return path


def write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    """One vault of every kind, good and bad, indexed once."""
    manual = shared_path("corpora", "attachments", "pdf", MANUAL)
    sample = shared_path("corpora", "attachments", "canvas", "jsoncanvas-sample.canvas")
    root = tmp_path_factory.mktemp("kinds")
    vault = root / "vault"
    write(vault / "notes" / "Plan.md", f"# Plan\n\nSee page two: ![[{MANUAL}#page=2]]\n")
    write(vault / "board.canvas", canvas(BOARD))
    shutil.copy(sample, vault / "sample.canvas")
    write(vault / "sketch.excalidraw.md", EXCALIDRAW_MD)
    write(vault / "tank.excalidraw", EXCALIDRAW_JSON)
    (vault / "manual").mkdir()
    shutil.copy(manual, vault / "manual" / MANUAL)
    data = manual.read_bytes()
    write(vault / "bad" / "truncated.pdf", data[: len(data) // 2])
    write(vault / "bad" / "encrypted.pdf", make_pdf(["A secret page"], encrypt=True))
    write(vault / "bad" / "fake.pdf", "This is a note someone named .pdf\n")
    write(vault / "bad" / "broken.canvas", '{"nodes": [{"id": "a", "type": "text", "text": ')
    write(vault / "photo.png", b"\x89PNG\r\n\x1a\n not indexed while ocr is off")
    config = load_config(config_for(root, vault), env={})
    with open_index(config, env={}) as index:
        index.indexer.reconcile()
        yield index


def top(index: Index, query: str) -> Hit:
    hits = index.searcher.search(SearchQuery(query, k=3)).hits
    assert hits, query
    return hits[0]


@pytest.fixture(autouse=True)
def no_worker_left() -> Iterator[None]:
    """The extraction workers this process started end with each test (they are kept between
    files, so a test run alone would otherwise leave its PDF worker behind)."""
    yield
    close_children()


def test_a_sentence_from_a_pdf_page_finds_the_pdf_with_that_page(indexed: Index) -> None:
    page_text = pdf.extract(MANUAL, (indexed.vault / "manual" / MANUAL).read_bytes())
    block = next(b for b in page_text.blocks if b.location.page == PAGE)
    sentence = max(block.text.split("\n"), key=lambda line: len(line.split()))
    assert len(sentence.split()) >= 6, sentence
    hit = top(indexed, sentence)
    assert hit.path == f"manual/{MANUAL}"
    assert hit.kind == "pdf"
    where = hit.location
    assert where.page is not None and where.page_end is not None
    assert where.page <= PAGE <= where.page_end


def test_read_note_gives_a_pdfs_pages_and_refuses_what_is_no_range_of_them(
    indexed: Index,
) -> None:
    from vaultd.api.local import LocalService
    from vaultd.api.operations import NoteReadRequest, OutlineRequest
    from vaultd.errors import ApiError, NoteError

    service = LocalService(indexed)
    pages = pdf.read((indexed.vault / "manual" / MANUAL).read_bytes())["pages"]
    path = f"manual/{MANUAL}"

    def read(**asked: Any) -> Any:
        return service.note(NoteReadRequest.model_validate({"path": path, "text": True, **asked}))

    one = read(start_page=PAGE, end_page=PAGE)
    assert (one.start_page, one.end_page, one.total_pages) == (PAGE, PAGE, len(pages))
    assert one.text == pages[PAGE - 1] and one.start_line is None
    whole = read()
    assert (whole.start_page, whole.end_page) == (1, len(pages))
    assert pages[0] in whole.text and pages[-1] in whole.text
    for bad in ({"start_page": len(pages) + 1}, {"start_page": 2, "end_page": 1}):
        with pytest.raises(ApiError, match="not a range"):
            read(**bad)
    with pytest.raises(ApiError, match="read by pages"):
        read(start_line=1)
    note = NoteReadRequest(path="notes/Plan.md", text=True, start_page=1)
    with pytest.raises(ApiError, match="pages are a PDF's"):
        service.note(note)
    assert service.note(NoteReadRequest(path="notes/Plan.md", text=True)).total_pages is None
    # Its headings would be read from the PDF's bytes: no outline, said so.
    with pytest.raises(NoteError, match="is a pdf, not a note: it has no outline"):
        service.outline(OutlineRequest(path=path))


def test_read_note_gives_the_text_indexed_from_a_canvas_a_drawing_or_an_image(
    indexed: Index,
) -> None:
    """Never the file: a canvas's JSON, a drawing's compressed data, an image's pixels."""
    from vaultd.api.local import LocalService
    from vaultd.api.operations import NoteReadRequest
    from vaultd.errors import NoteUnavailableError

    service = LocalService(indexed)

    def read(path: str, **asked: Any) -> Any:
        return service.note(NoteReadRequest.model_validate({"path": path, "text": True, **asked}))

    board = read("board.canvas")
    # The cards' text in reading order (outside any group first), the file card a link.
    assert board.text == f"{BOARD[3]['url']}\n\n{BOARD[1]['text']}"
    assert [(p.node, p.headings) for p in board.blocks] == [
        ("web", []),
        ("card-kestrel", ["Birds"]),
    ]
    # A hit's line range reads its card, with its group.
    hit = top(indexed, "kestrels hovering over motorway verges hunting voles")
    card = read("board.canvas", start_line=hit.start_line, end_line=hit.end_line)
    assert card.text == BOARD[1]["text"]
    assert [(p.node, p.headings) for p in card.blocks] == [("card-kestrel", ["Birds"])]

    sketch = read("sketch.excalidraw.md")
    assert (
        sketch.text == "Quokka selfie spot by the ferry pier\n\nBring the wide lens\nfor [[Plan]]"
    )
    assert [p.node for p in sketch.blocks] == ["quokka01", "lens0002"]
    assert read("tank.excalidraw").text == "Axolotl tank layout, filter on the left"
    # A note and a source file are their own text, without blocks.
    assert read("notes/Plan.md").blocks is None

    with pytest.raises(NoteUnavailableError, match="ocr = false"):
        read("photo.png")
    with pytest.raises(NoteUnavailableError, match="not a JSON Canvas file"):
        read("bad/broken.canvas")
    with pytest.raises(NoteUnavailableError, match="encrypted"):
        read("bad/encrypted.pdf")


def test_a_canvas_card_finds_the_canvas_and_names_the_card(indexed: Index) -> None:
    hit = top(indexed, "kestrels hovering over motorway verges hunting voles")
    assert (hit.path, hit.kind, hit.location.node) == ("board.canvas", "canvas", "card-kestrel")
    assert hit.section == "Birds"  # its group's label
    sample = top(indexed, "Learn more: Apps, Spec, Github")
    assert (sample.path, sample.location.node) == ("sample.canvas", "59e896bc8da20699")
    link_card = top(indexed, "example.org raptors")
    assert (link_card.path, link_card.location.node) == ("board.canvas", "web")


def test_a_canvas_file_card_is_a_backlink_and_a_pdf_embed_resolves_to_the_pdf(
    indexed: Index,
) -> None:
    assert "board.canvas" in indexed.manifest.links.backlinks("notes/Plan.md")
    links = indexed.manifest.notes.row("notes/Plan.md")["links"]  # type: ignore[index]
    targets = [link["target"] for link in links]
    assert resolve_links(indexed.manifest, "notes/Plan.md", targets) == [f"manual/{MANUAL}"]
    assert "notes/Plan.md" in indexed.manifest.links.backlinks(f"manual/{MANUAL}")


def test_excalidraw_text_elements_are_found_and_the_drawing_never_read(indexed: Index) -> None:
    hit = top(indexed, "quokka selfie spot at the ferry pier")
    assert (hit.path, hit.kind, hit.location.node) == (
        "sketch.excalidraw.md",
        "excalidraw",
        "quokka01",
    )
    assert hit.title == "sketch"
    chunks = indexed.manifest.notes.chunks_of("sketch.excalidraw.md")
    assert [c.chunk.location.node for c in chunks] == ["quokka01", "lens0002"]
    assert not any(DRAWING_DATA[:20] in c.chunk.text for c in chunks)
    assert "sketch.excalidraw.md" in indexed.manifest.links.backlinks("notes/Plan.md")
    plain = top(indexed, "axolotl tank layout")
    assert (plain.path, plain.location.node) == ("tank.excalidraw", "ax1")
    assert not any(
        "Deleted" in c.chunk.text for c in indexed.manifest.notes.chunks_of("tank.excalidraw")
    )


def test_bad_files_are_left_out_with_their_reason_and_kinds_are_counted(indexed: Index) -> None:
    left = {e.path: (e.kind, e.reason) for e in indexed.manifest.failures.left_out()}
    assert left["bad/truncated.pdf"][0] == "damaged"
    assert left["bad/encrypted.pdf"] == ("encrypted", "encrypted: it opens only with a password")
    assert left["bad/fake.pdf"] == ("damaged", "not a PDF file (no %PDF header)")
    assert left["bad/broken.canvas"][0] == "damaged"
    assert "not a JSON Canvas file" in left["bad/broken.canvas"][1]
    # Damaged and encrypted files are so for their bytes: not read again until they change.
    again = indexed.indexer.reconcile()
    assert again.left_out == [] and again.notes_changed == 0
    assert {e.path for e in indexed.manifest.failures.left_out()} == set(left)
    status = index_status(indexed).as_json()
    assert status["kinds"]["canvas"] == {"ok": 2, "left_out": 1}
    assert status["kinds"]["excalidraw"] == {"ok": 2}
    assert status["kinds"]["pdf"] == {"ok": 1, "left_out": 3}
    assert status["not_indexed"] == {"image": 1}


def test_200_mutations_of_a_real_pdf_are_each_read_or_left_out_with_a_reason() -> None:
    """Through the worker the indexer reads PDFs in (a dozen seconds: PDFium is quick on a
    two-page card); bench/soak/pdf_mutations.py runs more, with timings."""
    data = shared_path("corpora", "attachments", "pdf", MUTATED).read_bytes()
    rng = random.Random(1)
    outcomes = []
    for n in range(200):
        try:
            note = extract_note(f"m{n}.pdf", mutated(data, rng), extraction=Extraction())
        except LeftOutError as exc:
            assert exc.reason and exc.kind in ("damaged", "too_costly", "no_text"), exc
            outcomes.append(exc.kind)
        else:
            assert note.kind == "pdf" and all(b.location.page for b in note.blocks)
            outcomes.append("read")
    # Both ways out are taken: the mutations reach what PDFium checks, and what it forgives.
    assert outcomes.count("read") >= 20 and outcomes.count("damaged") >= 20, outcomes


def test_a_pdf_outline_is_the_heading_path_of_its_pages() -> None:
    note = pdf.extract(
        OUTLINED, shared_path("corpora", "attachments", "pdf", OUTLINED).read_bytes()
    )
    assert note.blocks[0].headings == ()  # before the first outline entry
    assert any(len(b.headings or ()) >= 2 for b in note.blocks), "nested entries"
    made = pdf.note_of(
        "x.pdf",
        {"pages": ["a", "b", "c"], "outline": [[0, "One", 0], [1, "One.A", 1], [0, "Two", 2]]},
    )
    assert [b.headings for b in made.blocks] == [("One",), ("One", "One.A"), ("Two",)]


def test_an_edited_page_moved_card_and_renamed_pdf_cost_only_what_changed(
    indexed: Index, tmp_path: Path
) -> None:
    """On the module's index (one model load less), in a folder of its own; last of the tests
    that use it, since it adds files (pytest runs a file's tests in order, on one worker).
    After the edit and the move, its export equals a fresh index's, of every kind in it."""
    vault = indexed.vault / "changing"
    index = indexed
    pages = ["Alpha page about herons", "Beta page about egrets", "Gamma page about storks"]
    write(vault / "birds.pdf", make_pdf(pages))
    cards = [
        {"id": "one", "type": "text", "text": "First card on wading birds", "x": 0, "y": 0},
        {"id": "two", "type": "text", "text": "Second card on sea birds", "x": 0, "y": 300},
    ]
    write(vault / "wall.canvas", canvas(cards))
    first = index.indexer.reconcile()
    assert first.notes_changed == 2 and first.chunks_embedded == 5
    before = {
        c.chunk.location.page: c.chunk.hash
        for c in index.manifest.notes.chunks_of("changing/birds.pdf")
    }
    assert sorted(before) == [1, 2, 3]

    pages[1] = "Beta page about spoonbills now"
    write(vault / "birds.pdf", make_pdf(pages))
    edited = index.indexer.reconcile()
    assert edited.chunks_embedded == 1
    after = {
        c.chunk.location.page: c.chunk.hash
        for c in index.manifest.notes.chunks_of("changing/birds.pdf")
    }
    assert after[1] == before[1] and after[3] == before[3] and after[2] != before[2]

    cards[0]["y"], cards[1]["y"] = 600, 0  # the cards swap places: the same texts
    write(vault / "wall.canvas", canvas(cards))
    moved = index.indexer.reconcile()
    assert moved.notes_changed == 1 and moved.chunks_embedded == 0
    wall = index.manifest.notes.chunks_of("changing/wall.canvas")
    assert [c.chunk.location.node for c in wall] == ["two", "one"]

    # Before the rename: a title taken from a file name reaches the vectors only with the
    # next edit (Indexer._rekeyed), so a fresh index would embed the new one.
    mine = list(export_records(index.store, with_vectors=True))
    assert {r["metadata"]["kind"] for r in mine} >= {"note", "canvas", "excalidraw", "pdf"}
    assert_same(mine, fresh_export(index.vault, tmp_path))

    os.rename(vault / "birds.pdf", vault / "renamed.pdf")
    renamed = index.indexer.reconcile()
    assert renamed.notes_moved == 1 and renamed.chunks_embedded == 0
    assert [
        c.chunk.location.page for c in index.manifest.notes.chunks_of("changing/renamed.pdf")
    ] == [1, 2, 3]
    hit = index.searcher.search(SearchQuery("spoonbills", k=1)).hits[0]
    assert (hit.path, hit.location.page) == ("changing/renamed.pdf", 2)


def test_kinds_turned_off_are_counted_not_indexed(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    write(vault / "note.md", "# Note\n\nWords.\n")
    write(vault / "a.pdf", make_pdf(["Some page text long enough to count"]))
    write(vault / "b.canvas", canvas([]))
    write(vault / "tool.py", "def f():\n    return 1\n")
    extra = "[attachments]\npdf = false\ncanvas = false\n"
    config = load_config(config_for(tmp_path, vault, extra), env={})
    with open_index(config, env={}) as index:
        index.indexer.reconcile()
        status = index_status(index).as_json()
    assert status["kinds"] == {"note": {"ok": 1}}
    assert status["not_indexed"] == {"canvas": 1, "other": 1, "pdf": 1}
    check, _ = check_vault(config)
    assert check.message.endswith("1 notes (not indexed: 1 canvas, 1 other, 1 pdf) in 1 folders")


def test_a_schema_9_manifest_gains_kinds_and_locations_in_place(tmp_path: Path) -> None:
    """Its notes are Markdown notes (kind 'note') and its chunks have no location: nothing is
    read or embedded again for them."""
    from vaultd.storage.manifest import Manifest
    from vaultd.storage.schema import register

    manifest = Manifest(tmp_path)
    manifest.close()
    db = sqlite3.connect(tmp_path / "vaultd.db")
    register(db)  # the keyword index's triggers call it
    db.execute(
        "INSERT INTO notes(path, size, mtime_ns, sha256, status, indexed_at) "
        "VALUES ('a.md', 1, 1, 'h', 'ok', 0)"
    )
    db.execute(
        "INSERT INTO chunks(id, path, idx, hash, title, section, headings, start_line, "
        "end_line, tokens, text) VALUES ('c', 'a.md', 0, 'x', 'A', '', '[]', 1, 1, 3, 'words')"
    )
    for table, column in (("notes", "kind"), *(("chunks", c) for c in LOCATION_COLUMNS)):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    db.execute("PRAGMA user_version = 9")
    db.commit()
    db.close()
    manifest = Manifest(tmp_path)
    try:
        assert manifest.notes.kind_counts() == {"note": {"ok": 1}}
        [chunk] = manifest.notes.chunks_of("a.md")
        assert (chunk.chunk.text, chunk.chunk.location) == ("words", Location())
        assert [chunk_id for chunk_id, _ in manifest.keyword.bm25("words", 5)] == ["c"]
    finally:
        manifest.close()


def test_a_reader_unused_for_a_while_is_ended_and_the_next_file_starts_one() -> None:
    from vaultd.isolation import _children, release_children, run_child

    def ask() -> dict[str, Any]:
        data = make_pdf(["Otters hold hands while asleep."])
        return run_child("vaultd.pipeline.pdf", "a.pdf", data, timeout=60, memory_mb=2048)

    first = ask()
    (child,) = [c for c in _children.values() if c.module == "vaultd.pipeline.pdf"]
    process = child._process
    assert process is not None and process.poll() is None
    assert release_children(3600) == 0, "just used: kept"
    assert release_children(0) == 1
    assert process.poll() is not None, "the worker process has ended"
    assert release_children(0) == 0, "already ended"
    assert ask() == first, "the next file starts a worker again and reads it the same"
