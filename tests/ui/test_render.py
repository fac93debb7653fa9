"""vaultd.ui.render: notes' Markdown as Obsidian shows it, and nothing in a note that can run.

Every output is parsed with html.parser and held to the allow-list tag by tag and attribute by
attribute, not only searched for substrings.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import frontmatter
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import shared_path
from vaultd.ui import render
from vaultd.ui.render import cut, passage, plain, snippet

# --- A small DOM, enough to check what the page would get -----------------------------------------

VOID = {"br", "hr", "img", "input"}
#: The allow-list as this test reads the brief, kept apart from the module's own copy.
ALLOWED: dict[str, set[str]] = {
    "a": {"href", "title", "class", "data-path", "rel"},
    "img": {"src", "alt", "width", "height", "class", "loading"},
    "span": {"class", "title"},
    "div": {"class", "data-callout", "data-callout-fold"},
    "code": {"class"},
    "pre": set(),
    "p": set(),
    "li": {"class", "id"},
    "sup": {"class", "id"},
    "section": {"class"},
    "td": {"align"},
    "th": {"align"},
    "input": {"type", "checked", "disabled"},
    "ol": {"start"},
    **{f"h{n}": {"id"} for n in range(1, 7)},
    **{
        tag: set()
        for tag in (
            *("br", "hr", "ul", "blockquote", "em", "strong", "del", "mark", "s", "sub"),
            *("table", "thead", "tbody", "tr"),
        )
    },
}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all(self, tag: str | None = None, cls: str | None = None) -> list[Node]:
        found: list[Node] = []
        for child in self.children:
            if isinstance(child, Node):
                if (tag is None or child.tag == tag) and (cls is None or cls in child.classes()):
                    found.append(child)
                found.extend(child.all(tag, cls))
        return found

    def one(self, tag: str | None = None, cls: str | None = None) -> Node:
        found = self.all(tag, cls)
        assert len(found) == 1, (tag, cls, found)
        return found[0]

    def visible(self) -> str:
        """The text outside code, as a reader would see it."""
        return "".join(
            c if isinstance(c, str) else ("" if c.tag in ("code", "pre") else c.visible())
            for c in self.children
        )


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]
        self.comments: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {name: value or "" for name, value in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert tag not in VOID, tag
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def dom(fragment: str) -> Node:
    builder = _Builder()
    builder.feed(fragment)
    builder.close()
    assert builder.stack == [builder.root], "unclosed tags"
    assert not builder.comments, builder.comments
    return builder.root


def scheme(url: str) -> str | None:
    squeezed = re.sub(r"[\x00-\x20\x7f]", "", html.unescape(url))
    m = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", squeezed)
    return m.group(1).lower() if m else None


def assert_safe(fragment: str) -> Node:
    """The fragment holds allow-listed tags and attributes only, no script, no handler, no
    style, no dangerous URL, and every image comes from this server's /file/."""
    lowered = fragment.lower()
    for opening in ("<script", "<style", "<iframe", "<svg", "<math", "<object", "<embed", "<form"):
        assert opening not in lowered, (opening, fragment)
    root = dom(fragment)
    for node in root.all():
        assert node.tag in ALLOWED, (node.tag, fragment)
        for name, value in node.attrs.items():
            assert name in ALLOWED[node.tag], (node.tag, name, fragment)
            assert not name.startswith("on") and name != "style", fragment
            if name in ("href", "src"):
                assert scheme(value) in (None, "http", "https", "mailto", "obsidian"), value
                assert not value.startswith("//"), value
        if node.tag == "img":
            assert node.attrs.get("src", "/file/").startswith("/file/"), fragment
        if node.tag == "input":
            assert node.attrs.get("type") == "checkbox", fragment
    return root


def resolver(table: dict[str, str]) -> Callable[[str], str | None]:
    return table.get


# --- The shared corpus: Obsidian's own help, rendered ---------------------------------------------

HELP_NOTES = [
    ("Editing and formatting", "Callouts.md"),
    ("Linking notes and files", "Internal links.md"),
    ("Editing and formatting", "Basic formatting syntax.md"),
    ("Linking notes and files", "Embed files.md"),
    ("Editing and formatting", "Tags.md"),
    ("Editing and formatting", "Advanced formatting syntax.md"),
    ("Editing and formatting", "Obsidian Flavored Markdown.md"),
]
SYNTAX = ("[[", "]]", "![[", "[!", "```", "**", "%%", "==")


def help_body(folder: str, name: str) -> str:
    path: Path = shared_path("corpora", "obsidian-help", "en", folder, name)
    body = frontmatter.load(str(path)).content
    # The help writes `\[\[` and `\*\*` where it means the reader to see the syntax itself;
    # those are taken out first, so that what is left visible can only be a rendering miss.
    return re.sub(r"\\[\[\]*=%!]", "", body)


@pytest.mark.corpus
@pytest.mark.parametrize(("folder", "name"), HELP_NOTES)
def test_help_notes_show_no_syntax(folder: str, name: str) -> None:
    body = help_body(folder, name)
    for resolve in (None, lambda target: target if "." in target else target + ".md"):
        root = assert_safe(passage(body, resolve))
        shown = root.visible()
        for mark in SYNTAX:
            assert mark not in shown, (mark, shown[max(0, shown.find(mark) - 80) :][:160])


@pytest.mark.corpus
def test_help_callouts_render_as_callouts() -> None:
    root = dom(passage(help_body("Editing and formatting", "Callouts.md")))
    callouts = root.all("div", "callout")
    assert len(callouts) >= 10
    kinds = {c.attrs["data-callout"] for c in callouts}
    assert {"info", "tip", "faq", "question", "todo"} <= kinds
    faq = next(c for c in callouts if c.attrs["data-callout"] == "faq")
    assert faq.attrs["data-callout-fold"] == "-"
    assert faq.one("div", "callout-title").text == "Are callouts foldable?"
    nested = next(c for c in callouts if c.attrs["data-callout"] == "question")
    assert nested.all("div", "callout"), "the nested callout inside 'question'"


@pytest.mark.corpus
def test_help_internal_links_resolve() -> None:
    body = help_body("Linking notes and files", "Internal links.md")
    root = dom(passage(body, lambda target: f"Help/{target}.md"))
    links = root.all("a", "internal-link")
    assert len(links) >= 5
    for link in links:
        href = link.attrs["href"]
        assert href.startswith(("#note/Help/", "#heading-")), href
        if href.startswith("#note/"):
            assert link.attrs["data-path"].startswith("Help/")
            assert " " not in href


@pytest.mark.corpus
def test_help_headings_have_anchors() -> None:
    root = dom(passage(help_body("Editing and formatting", "Basic formatting syntax.md")))
    ids = [h.attrs["id"] for n in range(1, 7) for h in root.all(f"h{n}")]
    assert ids and len(ids) == len(set(ids))
    assert all(re.fullmatch(r"heading-[a-z0-9-]+", i) for i in ids), ids


@pytest.mark.corpus
def test_help_snippets_keep_words_and_drop_syntax() -> None:
    body = help_body("Editing and formatting", "Callouts.md")
    # Paragraph by paragraph, as a passage's snippet would start; code is shown as written, so
    # paragraphs with code are left out.
    paragraphs = [p for p in body.split("\n\n") if p.strip() and "`" not in p]
    assert len(paragraphs) > 20
    for paragraph in paragraphs:
        display, sources = plain(paragraph)
        assert len(display) == len(sources)
        for mark in ("[[", "]]", "**", "[!", "%%"):
            assert mark not in display, (mark, paragraph)


# --- Hostile notes --------------------------------------------------------------------------------

HOSTILE = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    "<iframe src=javascript:alert(1)></iframe>",
    "<style>body{display:none}</style>",
    '<a href="javascript:alert(1)">x</a>',
    '<div onclick="alert(1)">click</div>',
    "<details open ontoggle=alert(1)>",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "<scr<script>ipt>alert(1)</script>",
    "<!-- comment --><b>bold</b>",
    "<!--><script>alert(1)</script>-->",
    "<object data=javascript:alert(1)>",
    "<form action=javascript:alert(1)><input type=submit>",
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](java\tscript:alert(1))",
    "[x](&#106;avascript:alert(1))",
    "[x](javascript&#58;alert(1))",
    "[x](javascript%3Aalert(1))",
    "[x](data:text/html,<script>alert(1)</script>)",
    "[x](vbscript:msgbox(1))",
    "[x](file:///etc/passwd)",
    "[x](//evil.example/path)",
    "[x](<javascript:alert(1)>)",
    '[x](https://ok.example "a\\" onmouseover=\\"alert(1)")',
    "<javascript:alert(1)>",
    "![x](javascript:alert(1))",
    "![x](data:image/png;base64,iVBORw0KGgo=)",
    "![x](https://evil.example/pixel.png)",
    "![x](//evil.example/pixel.png)",
    '![[x" onerror="alert(1).png]]',
    '![[x.png|100" onload="alert(1)]]',
    '[[x"><script>alert(1)</script>]]',
    "[[a|<img src=x onerror=alert(1)>]]",
    '[[javascript:alert(1)|click"]]',
    "> [!<img src=x onerror=alert(1)>] <script>alert(1)</script>\n> body",
    '> [!note" onclick="alert(1)] title\n> body',
    '```"><script>alert(1)</script>\ncode\n```',
    "```js onload=alert(1)\n<img src=x onerror=alert(1)>\n```",
    "`<script>alert(1)</script>`",
    "#<script>alert(1)</script>",
    '#tag"onmouseover="alert(1)',
    "# <img src=x onerror=alert(1)> heading",
    "| <script>alert(1)</script> | b |\n|---|---|\n| <img src=x onerror=alert(1)> | c |",
    "Text[^1]\n\n[^1]: <script>alert(1)</script>",
    "[^<script>]: x\n\ny[^<script>]",
    "==<script>alert(1)</script>==",
    "~~<img src=x onerror=alert(1)>~~",
    "- [x] <script>alert(1)</script>",
    "%%<script>%% <script>alert(1)</script>",
    "\u202e<script>alert(1)</script>\u200b",
    "＜script＞alert(1)＜/script＞ <ſcript>",
    "<a href='jav&#x09;ascript:alert(1)'>x</a>",
    '<img src="x" alt=\'"><script>alert(1)</script>\'>',
    "[![x](https://evil.example/i.png)](javascript:alert(1))",
    "[a [[b]] #c](https://ok.example)",
    "<base href=https://evil.example/>",
    '<meta http-equiv="refresh" content="0;url=https://evil.example">',
    "<link rel=stylesheet href=https://evil.example/x.css>",
]


def test_the_hostile_table_is_large() -> None:
    assert len(HOSTILE) >= 30


def everything(target: str) -> str:
    """A vault where every target resolves, to itself."""
    return target


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_notes_render_harmless(text: str) -> None:
    for resolve in (None, everything):
        assert_safe(passage(text, resolve))
    root = assert_safe(snippet(text, [(0, len(text))]))
    assert {n.tag for n in root.all()} <= {"mark"}


def test_hostile_html_is_shown_as_text() -> None:
    root = dom(passage("<b onclick=alert(1)>bold</b> and <script>x</script>"))
    assert not root.all("b")
    assert root.text.strip() == "<b onclick=alert(1)>bold</b> and <script>x</script>"


def test_resolved_paths_cannot_break_out() -> None:
    hostile = 'a"><script>alert(1)</script>.png'
    for text, tag in (
        ("[[x]]", "a"),
        ("![[x.png]]", "img"),
        ("![i](x.png)", "img"),
        ("[t](x.md)", "a"),
    ):
        root = assert_safe(passage(text, lambda _t: hostile))
        node = root.one(tag)
        assert node.attrs.get("data-path", hostile) == hostile
        url = node.attrs.get("href") or node.attrs["src"]
        assert url.startswith(("#note/", "/file/")) and "<" not in url and '"' not in url


@pytest.mark.parametrize(
    ("emitted", "kept"),
    [
        ("<script>alert(1)</script>ok", "ok"),
        ('<img src="https://evil.example/p.png" alt="a">', '<img alt="a">'),
        ('<img src="//evil.example/p.png">', "<img>"),
        ('<img src="/file/a.png" onerror="alert(1)">', '<img src="/file/a.png">'),
        ('<a href="javascript:alert(1)">x</a>', '<a rel="noopener noreferrer">x</a>'),
        (
            '<a href="data:text/html,x" class="tag evil">x</a>',
            '<a class="tag" rel="noopener noreferrer">x</a>',
        ),
        ('<p style="color:red" class="x">t</p>', "<p>t</p>"),
        ('<div data-callout="a b" id="main">t</div>', "<div>t</div>"),
        ('<input type="text" value="x" checked>', '<input type="checkbox" checked="">'),
        ("<iframe src=/file/x></iframe><svg><circle/></svg>", ""),
        ("<!-- note -->t", "t"),
        ('<h2 id="heading-ok">a</h2><h3 id="other">b</h3>', '<h2 id="heading-ok">a</h2><h3>b</h3>'),
    ],
)
def test_the_allow_list_is_a_wall_of_its_own(emitted: str, kept: str) -> None:
    # What a renderer bug could emit, given to the sanitizer directly.
    assert render._clean(emitted) == kept


def test_hostile_sizes_take_no_time() -> None:
    """Inputs that make careless patterns backtrack for minutes: each is done in well under a
    second; a few seconds allows for a slow machine."""
    texts = [
        "[a](" + "<a>" * 3000,
        "`a " * 20000,
        "%% a " * 20000,
        "[[" * 20000 + "]]" * 20000,
        "*a_" * 30000,
        "".join("  " * i + "- x\n" for i in range(600)),
        "|" + "-" * 5000 + "x",
        ">" * 3000 + " deep",
        "[x](" + "(a)" * 20000,
    ]
    for text in texts:
        started = time.monotonic()
        assert_safe(passage(text, everything))
        assert_safe(snippet(text, [(0, 50)]))
        assert time.monotonic() - started < 5, text[:40]


def test_deep_nesting_renders() -> None:
    text = "> " * 500 + "[!note] deep\n" + "- " * 300 + "x"
    assert "deep" in assert_safe(passage(text)).text


def test_dangerous_links_keep_their_text_only() -> None:
    for url in ("javascript:alert(1)", "data:text/html,x", "vbscript:x", "file:///etc/passwd"):
        root = dom(passage(f"[click me]({url})"))
        assert not root.all("a")
        assert root.text.strip() == "click me"


# --- Obsidian's syntax ----------------------------------------------------------------------------

VAULT = resolver(
    {
        "Settings": "Folder/Settings.md",
        "My Note": "Dir/My Note.md",
        "Note": "Note.md",
        "pic.png": "att/pic 1.png",
        "image.jpg": "att/image.jpg",
        "doc.pdf": "att/doc.pdf",
        "Folder/Note x.md": "Folder/Note x.md",
        "img/local.png": "img/local.png",
    }
)


def test_wikilink_resolved() -> None:
    link = dom(passage("See [[My Note]].", VAULT)).one("a")
    assert link.classes() == {"internal-link"}
    assert link.attrs["href"] == "#note/Dir/My%20Note.md"
    assert link.attrs["data-path"] == "Dir/My Note.md"
    assert link.text == "My Note"


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("[[Settings|the settings]]", "the settings"),
        ("[[Settings#Files and links]]", "Settings > Files and links"),
        ("[[Settings#^abc123|shown]]", "shown"),
        ("[[Settings#^abc123]]", "Settings > ^abc123"),
        ("[[Settings#A#B]]", "Settings > A > B"),
    ],
)
def test_wikilink_shown_text(source: str, shown: str) -> None:
    link = dom(passage(source, VAULT)).one("a")
    assert link.text == shown
    assert link.attrs["href"] == "#note/Folder/Settings.md"


def test_wikilink_unresolved_is_no_link() -> None:
    for resolve in (VAULT, None):
        root = dom(passage("A [[Missing note|gone]] here", resolve))
        assert not root.all("a")
        span = root.one("span")
        assert span.classes() == {"internal-link", "is-unresolved"}
        assert span.attrs["title"] == "not in the vault"
        assert span.text == "gone"


def test_wikilink_to_a_heading_of_the_same_note() -> None:
    root = dom(passage("## Files and links\n\nGo to [[#Files and links]].", VAULT))
    link = root.one("a")
    assert link.attrs["href"] == "#heading-files-and-links"
    assert link.text == "Files and links"
    assert root.one("h2").attrs["id"] == "heading-files-and-links"


def test_wikilink_with_an_escaped_bar_in_a_table() -> None:
    root = dom(passage("| a | b |\n|---|---|\n| [[Settings\\|set]] | 2 |", VAULT))
    link = root.all("td")[0].one("a")
    assert (link.text, link.attrs["data-path"]) == ("set", "Folder/Settings.md")
    assert len(root.all("td")) == 2


def test_image_embeds() -> None:
    img = dom(passage("![[pic.png]]", VAULT)).one("img")
    assert img.attrs["src"] == "/file/att/pic%201.png"
    assert img.attrs["alt"] == "pic.png"
    assert img.attrs["loading"] == "lazy"
    assert img.classes() == {"embed"}
    assert "width" not in img.attrs
    assert dom(passage("![[pic.png|300]]", VAULT)).one("img").attrs["width"] == "300"
    sized = dom(passage("![[image.jpg|100x145]]", VAULT)).one("img")
    assert (sized.attrs["width"], sized.attrs["height"]) == ("100", "145")
    alt = dom(passage("![[pic.png|a photo]]", VAULT)).one("img")
    assert alt.attrs["alt"] == "a photo" and "width" not in alt.attrs


def test_unresolved_image_embed() -> None:
    root = dom(passage("![[gone.png]]", VAULT))
    assert not root.all("img")
    span = root.one("span")
    assert span.classes() == {"embed", "is-unresolved"}
    assert span.text == "gone.png"


@pytest.mark.parametrize(
    ("source", "shown", "href"),
    [
        ("![[Note]]", "Note", "#note/Note.md"),
        ("![[Note#Heading]]", "Note > Heading", "#note/Note.md"),
        ("![[doc.pdf#page=3]]", "doc.pdf > page=3", "#note/att/doc.pdf"),
    ],
)
def test_other_embeds_are_links(source: str, shown: str, href: str) -> None:
    root = dom(passage(source, VAULT))
    assert not root.all("img")
    link = root.one("a")
    assert "internal-embed" in link.classes()
    assert (link.text, link.attrs["href"]) == (shown, href)


def test_markdown_images() -> None:
    img = dom(passage("![a local](img/local.png)", VAULT)).one("img")
    assert (img.attrs["src"], img.attrs["alt"]) == ("/file/img/local.png", "a local")
    sized = dom(passage("![wide|250](img/local.png)", VAULT)).one("img")
    assert (sized.attrs["alt"], sized.attrs["width"]) == ("wide", "250")


def test_external_images_are_links_never_images() -> None:
    root = dom(passage("![a cat](https://cats.example/cat.png) ![](http://x.example/y.gif)"))
    assert not root.all("img")
    cat, unnamed = root.all("a")
    assert cat.classes() == {"external-image"}
    assert cat.attrs["href"] == "https://cats.example/cat.png"
    assert cat.attrs["rel"] == "noopener noreferrer"
    assert (cat.text, unnamed.text) == ("a cat", "image")


def test_markdown_links() -> None:
    root = dom(passage("[site](https://ex.example/a?b=1) [mail](mailto:a@b.example)"))
    site, mail = root.all("a")
    assert site.attrs["href"] == "https://ex.example/a?b=1"
    assert site.attrs["rel"] == "noopener noreferrer"
    assert mail.attrs["href"] == "mailto:a@b.example"
    vault = dom(passage("[open](obsidian://open?vault=v&file=n)")).one("a")
    assert vault.attrs["href"] == "obsidian://open?vault=v&file=n"
    note = dom(passage("[the note](Folder/Note%20x.md)", VAULT)).one("a")
    assert note.classes() == {"internal-link"}
    assert note.attrs["data-path"] == "Folder/Note x.md"
    assert note.attrs["href"] == "#note/Folder/Note%20x.md"
    gone = dom(passage("[gone](Nowhere.md)", VAULT))
    assert not gone.all("a") and gone.one("span").text == "gone"


def test_bare_urls_are_links() -> None:
    link = dom(passage("see https://ex.example/page#part now")).one("a")
    assert link.attrs["href"] == "https://ex.example/page#part"


def test_tags() -> None:
    root = dom(passage("Tagged #idea and #project/active, not #123 nor page#frag.", VAULT))
    tags = root.all("a", "tag")
    assert [t.text for t in tags] == ["#idea", "#project/active"]
    assert tags[0].attrs["href"] == "#search?tag=idea"
    assert tags[1].attrs["href"] == "#search?tag=project%2Factive"
    assert "#123" in root.text and "page#frag" in root.text


def test_tags_in_unicode_and_emphasis() -> None:
    root = dom(passage("**#重要** and *#tag*"))
    assert [t.text for t in root.all("a", "tag")] == ["#重要", "#tag"]


def test_code_is_left_alone() -> None:
    source = (
        "Inline `[[Note]] #tag ![[pic.png]] <b>` here.\n\n"
        "```Python\n[[Note]] #tag ![[pic.png]] %%c%% ^abc <script>alert(1)</script>\n```"
    )
    root = dom(passage(source, VAULT))
    assert not root.all("a") and not root.all("img")
    inline, block = root.all("code")
    assert inline.text == "[[Note]] #tag ![[pic.png]] <b>"
    assert block.text == "[[Note]] #tag ![[pic.png]] %%c%% ^abc <script>alert(1)</script>\n"
    assert block.attrs["class"] == "language-python"


def test_code_language_is_sanitized() -> None:
    code = dom(passage('```C++"><x onclick=y\nint x;\n```')).one("code")
    assert code.attrs["class"] == "language-c++x"
    assert dom(passage("```c#\nx\n```")).one("code").attrs["class"] == "language-c#"


def test_heading_ids() -> None:
    root = dom(passage("# Hello, World!\n\n## Hello World\n\n### Café crème\n\n## 日本語"))
    ids = [h.attrs["id"] for h in root.all() if h.tag in ("h1", "h2", "h3")]
    assert ids[:3] == ["heading-hello-world", "heading-hello-world-1", "heading-cafe-creme"]
    cjk = ids[3]
    assert re.fullmatch(r"heading-[a-z0-9-]+", cjk)
    jump = dom(passage("[[#日本語]]")).one("a")
    assert jump.attrs["href"] == "#" + cjk


def test_callout_with_title() -> None:
    root = dom(passage("> [!tip] Use **this**\n> Body [[Note]].", VAULT))
    callout = root.one("div", "callout")
    assert callout.attrs["data-callout"] == "tip"
    title = callout.one("div", "callout-title")
    assert title.text == "Use this" and title.one("strong").text == "this"
    content = callout.one("div", "callout-content")
    assert content.one("a").attrs["data-path"] == "Note.md"
    assert not root.all("blockquote")
    assert "[!" not in root.text


def test_callout_without_title_and_folding() -> None:
    for marker, fold in (("", None), ("+", "+"), ("-", "-")):
        callout = dom(passage(f"> [!WARNING]{marker}\n> careful")).one("div", "callout")
        assert callout.attrs["data-callout"] == "warning"
        assert callout.attrs.get("data-callout-fold") == fold
        assert callout.one("div", "callout-title").text == "Warning"
        assert callout.one("div", "callout-content").text.strip() == "careful"


def test_callout_type_is_sanitized() -> None:
    callout = dom(passage('> [!My "Type"!]\n> x')).one("div", "callout")
    assert callout.attrs["data-callout"] == "mytype"


def test_nested_callouts() -> None:
    source = "> [!question] Can callouts be nested?\n> > [!todo] Yes!\n> > > [!example] Deeper"
    outer = dom(passage(source)).all("div", "callout")[0]
    kinds = [c.attrs["data-callout"] for c in [outer, *outer.all("div", "callout")]]
    assert kinds == ["question", "todo", "example"]
    deepest = outer.all("div", "callout")[-1]
    assert deepest.one("div", "callout-title").text == "Deeper"


def test_plain_blockquote_stays_a_blockquote() -> None:
    root = dom(passage("> just [a] quote\n> [!not a callout]"))
    assert root.one("blockquote") and not root.all("div")


def test_block_ids_are_hidden() -> None:
    root = dom(passage("A paragraph. ^abc123\n\n- item ^item-1\n\n> quote\n\n^quote-id"))
    assert "^" not in root.text
    assert "A paragraph." in root.text and "item" in root.text
    assert "x^2" in dom(passage("x^2 is not an id")).text


def test_comments_are_hidden() -> None:
    source = "Seen %%unseen%% seen.\n\n%%\nhidden\n\nstill hidden\n%%\n\nAfter."
    text = dom(passage(source)).text
    assert "unseen" not in text and "hidden" not in text and "%%" not in text
    assert "Seen" in text and "After." in text


def test_highlights_strikes_tasks_footnotes_tables() -> None:
    source = (
        "==marked== and ~~gone~~\n\n- [ ] todo\n- [x] done\n\n"
        "Said[^1].\n\n[^1]: A source.\n\n| l | c | r |\n|:--|:-:|--:|\n| 1 | 2 | 3 |"
    )
    root = assert_safe(passage(source))
    assert root.one("mark").text == "marked" and root.one("del").text == "gone"
    boxes = root.all("input")
    assert [("checked" in b.attrs) for b in boxes] == [False, True]
    assert all("disabled" in b.attrs for b in boxes)
    assert root.one("sup", "footnote-ref").one("a").attrs["href"] == "#fn-1"
    assert root.one("section", "footnotes")
    assert [td.attrs["align"] for td in root.all("td")] == ["left", "center", "right"]


def test_character_references_show_as_characters() -> None:
    assert dom(passage("Fish &amp; chips &#x2603;")).text.strip() == "Fish & chips ☃"


def test_math_may_stay_text() -> None:
    assert "$x^2$" in dom(passage("Energy $x^2$ here")).text


# --- Snippets and plain text ----------------------------------------------------------------------


def marked(fragment: str) -> list[str]:
    return [html.unescape(m) for m in re.findall(r"<mark>(.*?)</mark>", fragment, re.S)]


def shown(fragment: str) -> str:
    return html.unescape(re.sub(r"</?mark>", "", fragment))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("[[target|shown]] and [[Plain]]", "shown and Plain"),
        ("![[img.png]] and ![[pic.png|300]] or ![[icon.svg#icon]]", "and or"),  # pictures: no words
        ("![[Note]] and ![[Note#Part|shown]]", "Note and Note#Part"),
        ("[text *here*](https://x.example/(a)) ![alt](p.png)", "text here alt"),
        ("**bold** __strong__ *it* _em_ ~~del~~ ==hi==", "bold strong it em del hi"),
        ("## Heading\n\nText", "Heading Text"),
        ("> [!info]+ The title\n> body", "The title body"),
        ("> [!warning]\n> body", "warning body"),
        ("> quoted\n> > deeper", "quoted deeper"),
        ("```py\nx = a * b\n```\nafter", "x = a * b after"),
        ("use `code` here", "use code here"),
        ("para ^blk-1\n\nnext", "para next"),
        ("keep %%not this%% then", "keep then"),
        ("snake_case and 2 * 3", "snake_case and 2 * 3"),
        ("- item one\n- item two", "- item one - item two"),
        ("\\*not emphasis\\*", "*not emphasis*"),
        ("[[#Heading]]", "Heading"),
        ("| a | b |\n|---|---|\n| 1 | 2 |", "| a | b | | 1 | 2 |"),
    ],
)
def test_plain_examples(source: str, expected: str) -> None:
    display, sources = plain(source)
    assert display == expected
    assert len(sources) == len(display)


def test_snippet_highlight_on_bold_word() -> None:
    source = "a **word** b"
    start = source.index("word")
    out = snippet(source, [(start, start + 4)])
    assert out == "a <mark>word</mark> b"
    # The range may take the markers too; they are gone, the word stays marked.
    assert snippet(source, [(2, 10)]) == "a <mark>word</mark> b"


def test_snippet_after_non_bmp_characters() -> None:
    source = "😀🎉 the **match** 𝔘 here"
    start = source.index("match")
    out = snippet(source, [[start, start + 5]])
    assert marked(out) == ["match"]
    assert shown(out) == "😀🎉 the match 𝔘 here"
    start = source.index("𝔘")
    assert marked(snippet(source, [(start, start + 1)])) == ["𝔘"]


def test_snippet_cjk() -> None:
    source = "日本語の**文字**と[[漢字|かんじ]]です"
    a = source.index("文字")
    b = source.index("かんじ")
    out = snippet(source, [(a, a + 2), (b, b + 3)])
    assert marked(out) == ["文字", "かんじ"]
    assert shown(out) == "日本語の文字とかんじです"


def test_snippet_highlight_on_syntax_only_disappears() -> None:
    source = "see [[target|shown]] **x**"
    t = source.index("target")
    out = snippet(source, [(t, t + 6), (source.index("**"), source.index("**") + 2)])
    assert marked(out) == []
    assert shown(out) == "see shown x"


def test_snippet_escapes_and_clips() -> None:
    out = snippet("<b>a</b> & c", [(-5, 2), (11, 99), (7, 3)])
    assert "<b>" not in out
    assert marked(out) == ["<b", "c"]
    assert shown(out) == "<b>a</b> & c"


def test_snippet_adjacent_ranges_merge() -> None:
    assert snippet("abcdef", [(0, 2), (2, 4)]) == "<mark>abcd</mark>ef"


PIECES = [
    "word",
    "Wort",
    "日本語",
    "😀",
    "𝔘x",
    " ",
    " ",
    "\n",
    "\n\n",
    "**",
    "__",
    "*",
    "_",
    "~~",
    "==",
    "`",
    "```",
    "%%",
    "[[",
    "]]",
    "|",
    "#",
    "![[",
    "[",
    "](",
    ")",
    "!",
    "> ",
    "[!tip]",
    "^id1",
    "\\",
    "- ",
    "<b>",
    "&amp;",
    "x_y",
]
FUZZ = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@FUZZ
@given(
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    st.lists(st.tuples(st.integers(0, 120), st.integers(0, 30)), max_size=4),
)
def test_snippet_marks_exactly_the_highlighted_shown_characters(
    source: str, spans: list[tuple[int, int]]
) -> None:
    ranges = [(start, start + length) for start, length in spans]
    display, sources = plain(source)
    # Only ever taken out, in order: each shown code point is the source's (a space may stand
    # for a whitespace run).
    assert sources == sorted(set(sources))
    for char, index in zip(display, sources, strict=True):
        assert char == source[index] or (char == " " and source[index].isspace())
    out = snippet(source, ranges)
    assert shown(out) == display

    def inside(index: int) -> bool:
        return any(start <= index < end for start, end in ranges)

    expected = "".join(source[i] for i in sources if inside(i))
    assert "".join("".join(marked(out)).split()) == "".join(expected.split())
    # Nothing shown outside a range is marked; every shown code point inside one is.
    runs = re.split(r"(<mark>.*?</mark>)", out, flags=re.S)
    position = 0
    for run in runs:
        text = html.unescape(re.sub(r"</?mark>", "", run))
        for offset in range(len(text)):
            assert inside(sources[position + offset]) == run.startswith("<mark>")
        position += len(text)


# --- cut ------------------------------------------------------------------------------------------


def test_cut_leaves_short_text() -> None:
    assert cut("Short enough.", 200) == "Short enough."
    assert cut("x" * 10, 10) == "x" * 10


def test_cut_at_a_sentence_end() -> None:
    text = "The first sentence is here. The second one runs on and on and on without an end"
    assert cut(text, 40) == "The first sentence is here.…"


def test_cut_at_a_word_when_the_sentence_is_too_short() -> None:
    text = "Short. Then a long run of words that goes past the limit for sure"
    out = cut(text, 30)
    assert out == "Short. Then a long run of…"
    assert len(out) <= 30


def test_cut_a_point_inside_a_number_is_no_sentence_end() -> None:
    text = "The value of pi is about 3.14159 and more words follow it here"
    assert cut(text, 28) == "The value of pi is about…"


def test_cut_a_single_long_word() -> None:
    assert cut("a" * 50, 10) == "a" * 9 + "…"


def test_cut_cjk_sentences() -> None:
    text = "これは最初の文です。これは二番目の文でとても長く続きます"
    assert cut(text, 20) == "これは最初の文です。…"


@pytest.mark.parametrize("limit", [5, 12, 33, 80])
def test_cut_never_cuts_mid_word_and_keeps_the_limit(limit: int) -> None:
    words = [
        "alpha",
        "beta,",
        "gamma!",
        "delta",
        "epsilon.",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    for n in range(1, len(words) + 1):
        text = " ".join(words[:n])
        out = cut(text, limit)
        assert len(out) <= limit
        if out == text:
            continue
        assert out.endswith("…")
        head = out[:-1]
        assert text.startswith(head)
        longest = max(len(w) for w in words[:n])
        if longest < limit:
            assert text[len(head)] in " ,!." or head == "", (text, out)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("… [!faq]- Are callouts foldable? Yes!", "… Are callouts foldable? Yes!"),
        ("… > [!tip]\n> Body", "… tip Body"),
    ],
)
def test_a_snippet_that_begins_inside_a_callouts_first_line_hides_its_marker(
    text: str, shown: str
) -> None:
    assert render.plain(text)[0] == shown


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("window.top.__pwned=1", "window.top.__pwned=1"),
        ("a lone * star and 3*4", "a lone * star and 3*4"),
        ("__dunder__ and **bold**", "dunder and bold"),
    ],
)
def test_an_emphasis_mark_without_its_other_half_is_text(text: str, shown: str) -> None:
    assert render.plain(text)[0] == shown
