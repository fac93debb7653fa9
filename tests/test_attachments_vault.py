"""Acceptance 1 of every file a vault holds, with the real files: a vault of obsidian-help's
notes with the screenshots they embed, the PDF manuals and the JSON Canvas sample of the shared
corpus, and a copy of an installed package's Python sources under a `code` glob, indexed once
with `ocr = true`. A sentence of page N finds its PDF with page N, a canvas card's text its
card, a docstring its symbol, and a word seen only in a screenshot the screenshot.

A subset keeps it fast (the whole of obsidian-help with its 48 screenshots is minutes of OCR):
the import notes, the two screenshots the Roam note embeds, a PDF with a text layer and one
without, and the package's own modules (not its subpackages).
"""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pathspec as installed
import pytest

from tests.conftest import shared_path
from tests.test_attachments import config_for
from vaultd.answers import Hit
from vaultd.config import load_config
from vaultd.index.open import Index, open_index
from vaultd.isolation import close_children
from vaultd.pipeline import pdf
from vaultd.query import SearchQuery

pytestmark = pytest.mark.corpus

#: The folders of obsidian-help/en copied whole, and the screenshots copied beside them.
FOLDERS = ("Import notes",)
SCREENSHOTS = ("Roam-exporting.png", "Roam-Importer-importing.png")
#: Seen only in Roam-exporting.png (no note of obsidian-help says it).
SEEN_ONLY = "Find or Create Page"
#: The PDFs (pixel.pdf has no text layer: OCR reads it), and the page searched for.
PDFS = ("CAD.pdf", "pixel.pdf")
PAGED, PAGE = "CAD.pdf", 4
#: The sample's card "Learn more: Apps, Spec, Github" and its id.
CARD, NODE = "Learn more: Apps, Spec, Github", "59e896bc8da20699"
#: The function of the copied package whose docstring is searched for.
FUNCTION = "normalize_file"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    help_en = shared_path("corpora", "obsidian-help", "en")
    attachments = shared_path("corpora", "attachments")
    root = tmp_path_factory.mktemp("whole")
    vault = root / "vault"
    vault.mkdir()
    shutil.copy(help_en / "Home.md", vault / "Home.md")
    for folder in FOLDERS:
        shutil.copytree(help_en / folder, vault / folder)
    (vault / "Attachments").mkdir()
    for name in SCREENSHOTS:
        shutil.copy(attachments / "images" / name, vault / "Attachments" / name)
    (vault / "Manuals").mkdir()
    for name in PDFS:
        shutil.copy(attachments / "pdf" / name, vault / "Manuals" / name)
    shutil.copy(attachments / "canvas" / "jsoncanvas-sample.canvas", vault / "Sample.canvas")
    package = Path(installed.__file__).parent
    (vault / "code" / "pathspec").mkdir(parents=True)
    for module in package.glob("*.py"):
        shutil.copy(module, vault / "code" / "pathspec" / module.name)
    # A generous extraction limit: what is proven here is what OCR finds, not how fast on a busy
    # machine (the OCR benchmark measures that).
    extra = '[attachments]\nocr = true\nextract_timeout = "10m"\ncode = ["code/**/*.py"]\n'
    config = load_config(config_for(root, vault, extra), env={})
    try:
        with open_index(config, env={}) as index:
            index.indexer.reconcile()
            yield index
    finally:
        close_children()


def top(index: Index, query: str, k: int = 3) -> list[Hit]:
    hits = index.searcher.search(SearchQuery(query, k=k)).hits
    assert hits, query
    return hits


def test_every_kind_is_indexed(indexed: Index) -> None:
    kinds = indexed.manifest.notes.kind_counts()
    assert kinds["note"]["ok"] == 1 + sum(
        len(list((indexed.vault / f).rglob("*.md"))) for f in FOLDERS
    )
    assert kinds["image"] == {"ok": len(SCREENSHOTS)}
    assert kinds["pdf"]["ok"] >= len(PDFS) - 1, kinds["pdf"]  # pixel.pdf: what OCR reads
    assert kinds["canvas"] == {"ok": 1}
    assert kinds["code"] == {"ok": len(list((indexed.vault / "code").rglob("*.py")))}


def test_a_sentence_of_page_n_finds_the_pdf_with_page_n(indexed: Index) -> None:
    pages = pdf.read((indexed.vault / "Manuals" / PAGED).read_bytes())["pages"]
    sentence = max(pages[PAGE - 1].split("\n"), key=lambda line: len(line.split()))
    assert len(sentence.split()) >= 8, sentence
    hit = top(indexed, sentence)[0]
    assert (hit.path, hit.kind) == (f"Manuals/{PAGED}", "pdf")
    where = hit.location
    assert where.page is not None and where.page_end is not None
    assert where.page <= PAGE <= where.page_end


def test_a_canvas_cards_text_finds_the_canvas_and_its_card(indexed: Index) -> None:
    hit = top(indexed, CARD)[0]
    assert (hit.path, hit.kind, hit.location.node) == ("Sample.canvas", "canvas", NODE)


def test_a_docstring_finds_its_symbol(indexed: Index) -> None:
    source = (indexed.vault / "code" / "pathspec" / "util.py").read_text(encoding="utf-8")
    function = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION
    )
    docstring = ast.get_docstring(function) or ""
    first = " ".join(docstring.split("\n\n")[0].split())
    assert len(first.split()) >= 8, first
    hit = top(indexed, first)[0]
    assert (hit.path, hit.kind) == ("code/pathspec/util.py", "code")
    assert hit.location.symbol == f"def {FUNCTION}"
    assert hit.start_line <= function.lineno <= hit.end_line


def test_a_word_only_in_a_screenshot_finds_the_screenshot(indexed: Index) -> None:
    notes = [p.read_text(encoding="utf-8") for p in indexed.vault.rglob("*.md")]
    assert not [n for n in notes if SEEN_ONLY.lower() in n.lower()]
    hit = top(indexed, SEEN_ONLY)[0]
    assert (hit.path, hit.kind) == ("Attachments/Roam-exporting.png", "image")


def test_read_note_of_a_hit_gives_what_was_indexed_for_every_kind(indexed: Index) -> None:
    """What `read_note` (the MCP tool, `vaultd note --text`, GET /v1/notes/PATH?text=1) gives
    for a hit's range: the card, the screenshot's words, the function, the page."""
    from vaultd.api.local import LocalService
    from vaultd.api.operations import NoteReadRequest

    service = LocalService(indexed)

    def read(hit: Hit) -> Any:
        where = (
            {"start_page": hit.location.page, "end_page": hit.location.page_end}
            if hit.kind == "pdf"
            else {"start_line": hit.start_line, "end_line": hit.end_line}
        )
        return service.note(NoteReadRequest(path=hit.path, text=True, **where))

    nodes = json.loads((indexed.vault / "Sample.canvas").read_text(encoding="utf-8"))["nodes"]
    card = read(top(indexed, CARD)[0])
    assert card.text == next(n["text"] for n in nodes if n["id"] == NODE).strip()
    assert [p.node for p in card.blocks] == [NODE]
    screenshot = read(top(indexed, SEEN_ONLY)[0])
    assert SEEN_ONLY in screenshot.text and screenshot.blocks
    whole = service.note(NoteReadRequest(path="Attachments/Roam-exporting.png", text=True))
    assert SEEN_ONLY in whole.text and "PNG" not in whole.text
    symbol = top(indexed, f"def {FUNCTION}")[0]
    lines = (indexed.vault / symbol.path).read_text(encoding="utf-8").split("\n")
    function = read(symbol)
    assert function.text == "\n".join(lines[symbol.start_line - 1 : symbol.end_line])
    assert function.blocks is None
    page = read(top(indexed, "CAD")[0])
    assert page.total_pages and page.text.strip()
