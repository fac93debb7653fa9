"""The page in a real headless browser (Debian's Chromium through Playwright) against a real
daemon on a subset of obsidian-help/en: search as you type, a hit's note with its related notes,
the health view changing while a first index runs and while a note is edited, and a PDF read in
part named there with what of it was not read.

The screenshots in docs/ui/ are tests/test_ui_page.py's."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.daemon import (
    PATIENCE,
    RunningDaemon,
    short_socket_dir,
    start,
    wait_until,
    write_config,
)
from tests.conftest import shared_path
from tests.highlighted import NOTE, PATH, QUERIES
from tests.page_server import CHROMIUM, chromium, enter, ui_server
from tests.pipeline.test_ocr import scanned_pdf
from vaultd.api.client import Client
from vaultd.layout import vault_id
from vaultd.ui.server import UiServer

#: obsidian-help/en's folders the vault takes: about a third of its notes, enough for related
#: notes and backlinks, quick to index.
FOLDERS = ("Editing and formatting", "Linking notes and files", "Getting started")

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
    ),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


def help_subset(target: Path) -> Path:
    source = shared_path("corpora", "obsidian-help", "en")
    for folder in FOLDERS:
        shutil.copytree(source / folder, target / folder, ignore=shutil.ignore_patterns("*.png"))
    shutil.copy2(source / "Home.md", target / "Home.md")
    return target


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return help_subset(tmp_path_factory.mktemp("help") / "vault")


@pytest.fixture(scope="module")
def sockets() -> Path:
    return short_socket_dir() / "vaultd.sock"


@pytest.fixture(scope="module")
def ui(sockets: Path, vault: Path) -> Iterator[UiServer]:
    # Before the daemon: the page is open on the health view when its first index starts.
    with ui_server(Client(sockets, timeout=90, vault_id=vault_id(vault)), vault) as server:
        yield server


@pytest.fixture(scope="module")
def daemon(
    page: Any, sockets: Path, vault: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    work = tmp_path_factory.mktemp("work")
    # OCR on with a time limit a PDF of 200 scans passes (test 5); the vault has no images.
    attachments = '[attachments]\nocr = true\nextract_timeout = "5s"\n'
    config = write_config(work / "vaultd.toml", vault, work / "data", sockets, extra=attachments)
    # Not waiting for the first index: the health view is watched while it runs.
    d = start(config, sockets, work / "vaultd.log", wait_ready=False)
    try:
        yield d
    finally:
        if d.process.poll() is None:
            d.stop()


@pytest.fixture(scope="module")
def page(ui: UiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with chromium() as browser:
        # As `vaultd ui` opens it: the private file, its link, the cookie, the page.
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = enter(context, ui, tmp_path_factory.mktemp("run"))
        page.goto(page.url + "#health")
        yield page


def events_seen(page: Any) -> int:
    return int(page.evaluate("Number(document.body.dataset.events || 0)"))


def hits_drawn(page: Any, query: str) -> None:
    """Wait until the page has drawn the hits of `query`."""
    page.wait_for_function(
        "q => document.body.dataset.lastQuery === q"
        " && document.querySelectorAll('#hits li').length",
        arg=query,
        timeout=PATIENCE * 1000,
    )


def test_1_the_health_view_changes_while_the_first_index_runs(
    page: Any, daemon: RunningDaemon
) -> None:
    # The page was open on the health view before the daemon started.
    wait_until(lambda: events_seen(page) > 0, "the page saw an event of the first index")
    phase = page.text_content("#h-events")
    assert "note_indexed" in phase or "phase" in phase, phase
    daemon.wait_idle()
    wait_until(lambda: "pass_done" in page.text_content("#h-events"), "the pass ended on the page")


def test_2_typing_shows_hits_within_300_ms_of_the_last_keystroke(
    page: Any, daemon: RunningDaemon
) -> None:
    page.goto(page.url.split("#")[0] + "#search")
    # Typed afresh up to five times, the best counting: the suite runs beside other tests (and
    # must pass with a CPU burner per core), where one search can wait for a core; a page whose
    # hits never come within 300 ms still fails. The latency itself is measured, on a quiet
    # machine, by bench/speed/ui_typing.py.
    tries: list[tuple[float, object]] = []
    for query in ("embed a file", "embed files", "embed a file", "embedding files", "embed a"):
        page.fill("#q", "")
        page.click("#q")
        page.keyboard.type(query, delay=60)
        hits_drawn(page, query)
        since_key = page.evaluate("window.vaultdDrawnAt - window.vaultdLastKey")
        tries.append((since_key, page.evaluate("window.vaultdTimings")))
        print(f"{query!r}: hits drawn {since_key:.0f} ms after the last keystroke")
        if since_key <= 300:
            break
    assert min(t[0] for t in tries) <= 300, tries
    assert page.locator("#hits li mark").count() > 0  # the snippets' matched words
    first = page.locator("#hits li").first
    assert first.locator(".kind").text_content() == "note"
    assert first.locator("a[href^='obsidian://open?vault=']").count() == 1


def test_3_opening_a_hit_shows_its_note_and_related_notes(page: Any, daemon: RunningDaemon) -> None:
    page.locator("#hits li .hit-title").first.click()
    page.wait_for_function("() => document.body.dataset.noteShown", timeout=PATIENCE * 1000)
    assert page.locator("#note-chunks .chunk").count() > 0
    page.wait_for_function(
        "() => document.querySelectorAll('#note-related li').length > 0",
        timeout=PATIENCE * 1000,
    )
    assert page.locator("#note-outline li").count() > 0


def test_4_the_health_view_changes_while_a_note_is_edited(
    page: Any, daemon: RunningDaemon, vault: Path
) -> None:
    page.goto(page.url.split("#")[0] + "#health")
    before = events_seen(page)
    note = vault / "Home.md"
    note.write_text(note.read_text(encoding="utf-8") + "\nA line about lanterns.\n", "utf-8")
    wait_until(lambda: events_seen(page) > before, "the page saw the edit's events")
    wait_until(lambda: "Home.md" in page.text_content("#h-events"), "the edit on the page")
    wait_until(lambda: "p50" in page.text_content("#h-lag"), "the lag shown")


def test_5_a_pdf_read_in_part_is_named_with_what_was_not_read(
    page: Any, daemon: RunningDaemon, vault: Path
) -> None:
    page.goto(page.url.split("#")[0] + "#health")
    (vault / "scanned.pdf").write_bytes(scanned_pdf())
    wait_until(
        lambda: "scanned.pdf" in page.text_content("#h-inpart"), "the PDF read in part shown"
    )
    named = page.locator("#h-inpart li", has_text="scanned.pdf").text_content()
    assert named == (
        "scanned.pdf: pages 2-201 not read by OCR: took longer than 5 s to read (extract_timeout)"
    )
    assert "scanned.pdf" not in page.text_content("#h-leftout")


def test_6_a_typo_is_answered_in_words_a_person_can_read(page: Any, daemon: RunningDaemon) -> None:
    """A correction is shown as the notes on the page spell it, or else as the word typed: never
    as the words index's stem ("properti"), which reads as a second typo."""
    page.goto(page.url.split("#")[0] + "#search")
    query = "canvas tabels"
    page.fill("#q", query)
    hits_drawn(page, query)
    note = page.locator("#correction")
    assert note.is_visible()
    said = note.text_content()
    spelled = set(re.findall(r"\w+", page.text_content("#hits").lower())) | set(query.split())
    frame = {"showing", "results", "for", "also", "searched", "words", "close", "to"}
    unread = set(re.findall(r"\w+", said.lower())) - frame - spelled
    assert not unread, said


def test_6_a_decisive_query_as_typed_offers_its_correction_as_a_link(
    page: Any, daemon: RunningDaemon, vault: Path
) -> None:
    """A query that names a note as typed is searched as typed; its likely correction is a
    link that searches the corrected query."""
    (vault / "Kyotto.md").write_text("# Kyoto trip\n\nTemples in Kyoto.\n", encoding="utf-8")
    daemon.search("kyoto", k=1, wait_for="Kyotto.md")
    page.goto(page.url.split("#")[0] + "#search")
    page.fill("#q", "kyotto")
    hits_drawn(page, "kyotto")
    offer = page.locator("#correction a.did-you-mean")
    assert offer.text_content() == "kyoto"
    assert page.text_content("#correction") == "Did you mean kyoto?"
    offer.click()
    hits_drawn(page, "kyoto")
    assert page.input_value("#q") == "kyoto"


#: The snippet of each hit as drawn: its pieces of text, each marked or not.
DRAWN = """li => Array.from(li.querySelector('.snippet').childNodes, n =>
    [n.textContent, n.nodeName === 'MARK'])"""


def test_7_the_page_marks_the_matched_words_and_never_the_notes_bold(
    page: Any, daemon: RunningDaemon, vault: Path
) -> None:
    """Exactly the ranges the API gives are marked, as elements around text, wherever their
    code points are in UTF-16; the note's own `**bold**` is read, not shown as markup, and
    never marked."""
    (vault / PATH).write_text(NOTE, encoding="utf-8")
    daemon.search("saffron", k=1, wait_for=PATH)
    page.goto(page.url.split("#")[0] + "#search")
    for query, words in QUERIES.items():
        page.fill("#q", query)
        hits_drawn(page, query)
        item = page.locator("#hits li", has=page.locator(f"a[href='#note/{PATH}']"))
        pieces = item.evaluate(DRAWN)
        text = "".join(piece for piece, _ in pieces)
        assert {piece for piece, is_marked in pieces if is_marked} == words, pieces
        assert "**" not in text and "Ribbon:" in text and "🦦" in text, text
        assert item.locator(".snippet mark *").count() == 0  # text in the marks, nothing more
