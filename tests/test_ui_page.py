"""The page as a person reads it, in a real headless browser (Debian's Chromium through
Playwright) against a real daemon on part of obsidian-help/en with the screenshots its notes
embed and two real PDFs: notes rendered with none of their Markdown showing, a wiki-link and an
outline entry that go where they say, the local graph, a PDF hit's page and an image hit's
picture, one column at 390 px, dark mode, an accessibility audit (axe-core) of the four views,
and a daemon that stops and comes back with the page open.

With VAULTD_UI_SCREENSHOTS=DIR every view is saved there, light and dark, at desktop and phone
width (docs/ui/ is made so)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

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
from tests.page_server import CHROMIUM, chromium, enter, ui_server
from vaultd.api.client import Client
from vaultd.layout import vault_id
from vaultd.ui.server import UiServer

FOLDERS = ("Editing and formatting", "Linking notes and files", "Getting started")
#: The screenshots the notes of FOLDERS embed that the corpus holds, and one whose text OCR reads.
IMAGES = (
    "Engelbart.jpg",
    "link-block-heading.png",
    "internal-links-header.png",
    "iCloud-folder-location.png",
    "Mac-OS-DateTime.png",
    "Roam-exporting.png",
)
PDFS = ("asyRefCard.pdf", "TeXShopAndAsymptote.pdf")
CANVAS = "jsoncanvas-sample.canvas"
TAGGED = "Rose beds.md"
#: Notes that hold callouts, wiki-links, embeds, code and a table between them.
RICH = (
    "Editing and formatting/Callouts.md",
    "Editing and formatting/Advanced formatting syntax.md",
)
#: Markdown a reader of a rendered note never sees outside code.
SYNTAX = ("[[", "]]", "[!", "**", "```", "==", "![", "%%")
VIEWS = ("home", "search", "note", "health")

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
    ),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = shared_path("corpora", "obsidian-help", "en")
    attachments = shared_path("corpora", "attachments")
    target = tmp_path_factory.mktemp("help") / "vault"
    for folder in FOLDERS:
        shutil.copytree(source / folder, target / folder, ignore=shutil.ignore_patterns("*.png"))
    shutil.copy2(source / "Home.md", target / "Home.md")
    (target / "Attachments").mkdir()
    for name in IMAGES:
        shutil.copy2(attachments / "images" / name, target / "Attachments" / name)
    for name in PDFS:
        shutil.copy2(attachments / "pdf" / name, target / "Attachments" / name)
    shutil.copy2(attachments / "canvas" / CANVAS, target / CANVAS)
    (target / TAGGED).write_text(
        "# Rose beds\n\nPruning notes for the #gardening/roses beds, see [[Callouts]].\n",
        encoding="utf-8",
    )
    return target


@pytest.fixture(scope="module")
def daemon(vault: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    work = tmp_path_factory.mktemp("work")
    sockets = short_socket_dir() / "vaultd.sock"
    # OCR reads the screenshots; a busy machine may take minutes over them.
    extra = '[attachments]\nocr = true\nextract_timeout = "10m"\n'
    config = write_config(work / "vaultd.toml", vault, work / "data", sockets, extra=extra)
    d = start(config, sockets, work / "vaultd.log")
    try:
        d.wait_idle()
        yield d
    finally:
        if d.process.poll() is None:
            d.stop()


@pytest.fixture(scope="module")
def ui(daemon: RunningDaemon, vault: Path) -> Iterator[UiServer]:
    client = Client(daemon.socket, timeout=90, vault_id=vault_id(vault))
    with ui_server(client, vault) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def open_page(
    browser: Any, ui: UiServer, tmp: Path, *, dark: bool = False, bypass_csp: bool = False
) -> Any:
    """A new browser context let in as `vaultd ui` lets one in: the link file, the cookie."""
    context = browser.new_context(
        viewport={"width": 1200, "height": 800},
        color_scheme="dark" if dark else "light",
        bypass_csp=bypass_csp,
    )
    page = enter(context, ui, tmp)
    page.wait_for_function("() => document.body.dataset.homeShown", timeout=PATIENCE * 1000)
    page.wait_for_function(
        "() => document.getElementById('live').textContent === 'live'", timeout=PATIENCE * 1000
    )
    return page


@pytest.fixture(scope="module")
def page(browser: Any, ui: UiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    opened = open_page(browser, ui, tmp_path_factory.mktemp("link"))
    yield opened
    opened.context.close()


def go(page: Any, fragment: str) -> None:
    page.goto(page.url.split("#")[0] + fragment)


def show_note(page: Any, path: str) -> None:
    go(page, "#note/" + quote(path, safe=""))
    page.wait_for_function(
        "p => document.body.dataset.noteShown === p", arg=path, timeout=PATIENCE * 1000
    )


def search(page: Any, query: str, kind: str = "") -> None:
    go(page, "#search")
    page.select_option("#f-kind", kind)
    page.fill("#q", query)
    page.wait_for_function(
        "q => document.body.dataset.lastQuery === q"
        " && document.querySelectorAll('#hits li[id]').length",
        arg=query,
        timeout=PATIENCE * 1000,
    )


def image_loaded(locator: Any) -> bool:
    return bool(locator.evaluate("img => img.complete && img.naturalWidth > 0"))


def shot(page: Any, name: str) -> None:
    folder = os.environ.get("VAULTD_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=False)


#: The text of rendered passages a reader sees, code aside (code shows its syntax as written).
VISIBLE_TEXT = """() => {
  const box = document.getElementById('note-chunks').cloneNode(true);
  box.querySelectorAll('pre, code').forEach(n => n.remove());
  return box.innerText;
}"""


@pytest.mark.parametrize("path", RICH)
def test_a_note_renders_with_none_of_its_markdown_visible(page: Any, path: str) -> None:
    show_note(page, path)
    text = page.evaluate(VISIBLE_TEXT)
    assert text.strip()
    shown = [mark for mark in SYNTAX if mark in text]
    assert not shown, (shown, [line for line in text.splitlines() if any(m in line for m in shown)])
    chunks = page.locator("#note-chunks")
    for selector in ("a.internal-link", "pre code", ".callout"):
        assert chunks.locator(selector).count() > 0 or path != RICH[0], selector
    if path == RICH[1]:
        assert chunks.locator("table").count() > 0
    for img in chunks.locator("img.embed").all():
        img.scroll_into_view_if_needed()
        wait_until(lambda img=img: image_loaded(img), "an embedded screenshot is shown")


def test_a_wiki_link_in_a_passage_opens_the_linked_note(page: Any) -> None:
    show_note(page, RICH[0])
    link = page.locator("#note-chunks a.internal-link[data-path]").first
    target = link.get_attribute("data-path")
    assert target and target != RICH[0]
    link.click()
    page.wait_for_function(
        "p => document.body.dataset.noteShown === p", arg=target, timeout=PATIENCE * 1000
    )
    assert page.text_content("#note-path") == target


def test_a_link_to_a_heading_of_the_same_note_scrolls_to_it(page: Any) -> None:
    show_note(page, RICH[0])
    link = page.locator("#note-chunks a[href='#heading-supported-types']").first
    link.click()
    page.wait_for_function(
        "() => document.body.dataset.inNoteTarget === 'heading-supported-types'",
        timeout=PATIENCE * 1000,
    )
    assert page.evaluate("document.body.dataset.view") == "note"
    section = page.locator("#note-chunks [data-anchor='heading-supported-types']").first
    top = section.evaluate("p => p.getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"] / 2, top


def test_an_outline_entry_scrolls_to_its_passage(page: Any) -> None:
    show_note(page, RICH[1])
    entries = page.locator("#note-outline a")
    assert entries.count() > 3
    entry = entries.nth(entries.count() - 2)
    page.wait_for_function(
        "() => document.querySelectorAll('#note-chunks .chunk').length > 3",
        timeout=PATIENCE * 1000,
    )
    entry.click()
    target = page.wait_for_function(
        "() => document.body.dataset.outlineTarget", timeout=PATIENCE * 1000
    ).json_value()
    heading = entry.text_content()
    passage = page.locator(f"#{target}")
    top = passage.evaluate("p => p.getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"] / 2, top
    # The passage is the first of the heading's section.
    where = passage.locator(".passage-where").text_content()
    assert where.split(" › ")[-1] == heading, (heading, where)


def test_the_graph_draws_links_and_backlinks_and_a_click_opens_one(page: Any) -> None:
    show_note(page, "Linking notes and files/Internal links.md")
    graph = page.locator("#note-graph")
    page.wait_for_function(
        "() => Number(document.getElementById('note-graph').dataset.nodes) > 2",
        timeout=PATIENCE * 1000,
    )
    links = {a.get_attribute("data-path") for a in graph.locator("a.link, a.both").all()}
    backlinks = {a.get_attribute("data-path") for a in graph.locator("a.backlink, a.both").all()}
    assert links and backlinks
    # The graph's nodes are the notes the lists name (the lists may hold more than it draws).
    assert links <= listed(page, "#note-links") and backlinks <= listed(page, "#note-backlinks")
    assert "Linking notes and files/Internal links.md" not in links | backlinks
    node = graph.locator("a.backlink, a.both").first
    target = node.get_attribute("data-path")
    node.locator("circle").click()
    page.wait_for_function(
        "p => document.body.dataset.noteShown === p", arg=target, timeout=PATIENCE * 1000
    )


def listed(page: Any, list_id: str) -> set[str]:
    """The notes a list of the note view links to."""
    return set(
        page.eval_on_selector_all(
            f"{list_id} a", "as => as.map(a => decodeURIComponent(a.hash.slice(6)))"
        )
    )


def test_links_and_backlinks_are_listed_once_and_never_the_note_itself(page: Any) -> None:
    path = "Linking notes and files/Internal links.md"
    show_note(page, path)
    page.wait_for_function(
        "() => document.querySelectorAll('#note-backlinks a').length > 0",
        timeout=PATIENCE * 1000,
    )
    for list_id in ("#note-links", "#note-backlinks", "#note-related"):
        targets = [a.get_attribute("href") for a in page.locator(f"{list_id} a").all()]
        assert len(targets) == len(set(targets)), (list_id, targets)
        assert "#note/" + quote(path, safe="") not in targets, list_id


def test_a_pdf_hit_shows_the_page_it_was_found_on(page: Any) -> None:
    search(page, "array containing n deep copies", kind="pdf")
    hit = page.locator("#hits li[id]").first
    assert hit.locator(".kind").text_content() == "pdf"
    assert "page 2" in hit.locator(".section").text_content()
    thumb = hit.locator("img.thumb")
    assert "page=2" in (thumb.get_attribute("src") or "")
    wait_until(lambda: image_loaded(thumb), "the PDF's page drawn beside the hit")
    opener = hit.locator("a.hit-actions").get_attribute("href") or ""
    assert opener.endswith(quote("Attachments/asyRefCard.pdf#page=2", safe="")), opener


def test_an_image_hit_shows_its_picture_and_the_text_read_from_it(page: Any) -> None:
    search(page, "Find or Create Page", kind="image")
    hit = page.locator("#hits li[id]").first
    assert hit.locator(".kind").text_content() == "image"
    thumb = hit.locator("img.thumb")
    wait_until(lambda: image_loaded(thumb), "the image shown beside the hit")
    assert "Create" in hit.locator(".snippet").text_content()


def test_a_tag_in_a_passage_searches_within_it(page: Any) -> None:
    show_note(page, TAGGED)
    page.locator("#note-chunks a.tag").first.click()
    page.wait_for_function("() => document.body.dataset.view === 'search'")
    assert page.input_value("#f-tag") == "gardening/roses"
    assert "#gardening/roses" in page.text_content("#search-short")
    page.fill("#q", "pruning")
    page.wait_for_function(
        "() => document.body.dataset.lastQuery === 'pruning'", timeout=PATIENCE * 1000
    )
    assert {a.get_attribute("href") for a in page.locator("#hits .hit-title").all()} == {
        "#note/" + quote(TAGGED, safe="")
    }
    page.fill("#f-tag", "")


def test_a_canvas_hit_names_its_card(page: Any) -> None:
    search(page, "learn more apps spec github", kind="canvas")
    hit = page.locator("#hits li[id]").first
    assert hit.locator(".kind").text_content() == "canvas"
    assert "card “Learn more:”" in hit.locator(".section").text_content()


def test_the_keyboard_moves_through_hits_and_opens_one(page: Any) -> None:
    go(page, "#home")
    page.wait_for_function("() => document.body.dataset.view === 'home'")
    page.eval_on_selector("#f-kind", "s => { s.value = ''; }")  # the last test's filter
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.keyboard.type("internal links")
    page.wait_for_function(
        "() => document.body.dataset.lastQuery === 'internal links'", timeout=PATIENCE * 1000
    )
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    chosen = page.locator("#hits li.selected .hit-title").get_attribute("href")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.body.dataset.view === 'note'")
    assert page.evaluate("location.hash") == chosen
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.body.dataset.view === 'search'")
    assert page.input_value("#q") == "internal links"


def visit(page: Any, view: str) -> None:
    """Each view with something in it: the search with hits, a rich note."""
    if view == "search":
        search(page, "callout")
    elif view == "note":
        show_note(page, RICH[0])
        page.wait_for_function(
            "() => document.querySelectorAll('#note-related li a').length > 0",
            timeout=PATIENCE * 1000,
        )
    else:
        go(page, f"#{view}")
        page.wait_for_function(
            "v => document.body.dataset.view === v", arg=view, timeout=PATIENCE * 1000
        )
        if view == "health":
            page.wait_for_function(
                "() => document.body.dataset.healthNotes", timeout=PATIENCE * 1000
            )


#: Every element wider than the viewport (code scrolls inside its block, so none may be).
TOO_WIDE = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
  .map(e => e.tagName + '.' + e.className)"""


def test_at_390_px_every_view_is_one_column_and_nothing_is_wider(
    browser: Any, ui: UiServer, tmp_path: Path
) -> None:
    for dark in (False, True):
        page = open_page(browser, ui, tmp_path, dark=dark)
        try:
            for width, name in ((1200, "desktop"), (390, "phone")):
                page.set_viewport_size({"width": width, "height": 844})
                for view in VIEWS:
                    visit(page, view)
                    if width == 390:
                        assert page.evaluate(TOO_WIDE) == [], view
                        assert page.evaluate("document.documentElement.scrollWidth") <= 390
                        if view == "note":
                            columns = page.eval_on_selector(
                                ".columns", "c => getComputedStyle(c).gridTemplateColumns"
                            )
                            assert len(columns.split()) == 1, columns
                    shot(page, f"{view}-{name}-{'dark' if dark else 'light'}")
        finally:
            page.context.close()


def luminance(css: str) -> float:
    red, green, blue = (int(part) for part in css[css.index("(") + 1 : -1].split(",")[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def test_dark_mode_follows_the_browser(browser: Any, ui: UiServer, tmp_path: Path) -> None:
    backgrounds = {}
    for dark in (False, True):
        page = open_page(browser, ui, tmp_path, dark=dark)
        try:
            show_note(page, RICH[0])
            backgrounds[dark] = (
                page.eval_on_selector("body", "b => getComputedStyle(b).backgroundColor"),
                page.eval_on_selector("body", "b => getComputedStyle(b).color"),
            )
        finally:
            page.context.close()
    assert luminance(backgrounds[False][0]) > 0.9 and luminance(backgrounds[False][1]) < 0.3
    assert luminance(backgrounds[True][0]) < 0.2 and luminance(backgrounds[True][1]) > 0.7


AXE = """async () => {
  const result = await axe.run(document, { resultTypes: ['violations'] });
  return result.violations
    .filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => ({ id: v.id, impact: v.impact, help: v.help,
                 nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ')) }));
}"""


def axe_script() -> Path:
    """axe-core itself, as npm publishes it, from the wheel that carries it (no download)."""
    axe = pytest.importorskip("axe_playwright_python", reason="axe-playwright-python is absent")
    return Path(axe.__file__).parent / "axe.min.js"


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_axe_finds_no_serious_or_critical_violation_on_the_four_views(
    browser: Any, ui: UiServer, tmp_path: Path, dark: bool
) -> None:
    script = axe_script()
    # The page's policy allows only its own scripts: axe is injected past it, as a tool.
    page = open_page(browser, ui, tmp_path, dark=dark, bypass_csp=True)
    try:
        found = {}
        for view in VIEWS:
            visit(page, view)
            page.add_script_tag(path=str(script))
            found[view] = page.evaluate(AXE)
        assert all(not v for v in found.values()), found
    finally:
        page.context.close()


def test_zz_the_daemon_stopping_is_said_at_once_and_the_page_recovers_by_itself(
    page: Any, daemon: RunningDaemon
) -> None:
    """Last in the module: it stops the module's daemon (and starts it again)."""
    visit(page, "search")
    page.evaluate("window.vaultdSameDocument = 1")
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.process.wait(PATIENCE) == 0
    gone_at = time.monotonic()
    page.wait_for_selector("#gone", state="visible", timeout=PATIENCE * 1000)
    said_after = time.monotonic() - gone_at
    print(f"the page said the daemon was gone {said_after:.2f} s after it exited")
    assert said_after <= 2.0, said_after
    assert "vaultd run" in page.text_content("#gone-command")
    for view in VIEWS:
        go(page, f"#{view}")
        assert page.locator("#gone").is_visible(), view
    # An error is said beside the hits, never drawn as one.
    go(page, "#search")
    page.fill("#q", "callout blocks")
    page.wait_for_selector("#search-error", state="visible", timeout=PATIENCE * 1000)
    assert page.locator("#hits li[id]").count() == 0 or "daemon" not in page.text_content("#hits")
    go(page, "#health")
    assert page.text_content("#h-status") == "unreachable"
    shot(page, "daemon-gone")

    again = start(daemon.config, daemon.socket, daemon.log)
    try:
        page.wait_for_selector("#gone", state="hidden", timeout=PATIENCE * 1000)
        page.wait_for_function(
            "() => document.getElementById('h-status').textContent === 'ok'",
            timeout=PATIENCE * 1000,
        )
        wait_until(lambda: page.text_content("#live") == "live", "the event stream is back")
        assert page.evaluate("window.vaultdSameDocument") == 1  # no reload
    finally:
        again.stop()
