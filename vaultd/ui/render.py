"""Notes' Markdown as the page shows it: a passage rendered as Obsidian renders it, a search
snippet as plain text with its matches marked, both as HTML that is safe to insert.

Two walls stand between a note and the page. mistune parses with `escape=True`, so a note's
own HTML (`<script>`, `<img onerror>`, comments) only ever reaches the page as text, and every
tag in the output is one this module wrote. nh3 (Rust's ammonia) then cleans that output
against an allow-list of tags, attributes, classes and URLs: whatever a renderer bug lets
through, no script, event handler, inline style, foreign class or javascript:/data: URL
survives, and an image's source can only be this server's `/file/...`, so showing a note
never makes a request to another origin.

Obsidian's own syntax (wiki-links, embeds, tags, callouts, block ids, `%%comments%%`) is added
to mistune as inline rules, one block rule and a hook over the parsed blocks. Links are
resolved against the vault at render time through the caller's `resolve`.
"""

from __future__ import annotations

import bisect
import html
import re
import unicodedata
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from re import Match
from typing import Any, cast
from urllib.parse import quote, unquote

import mistune
import nh3
from mistune.block_parser import BlockParser
from mistune.core import BlockState, InlineState
from mistune.inline_parser import InlineParser

__all__ = ["Resolve", "cut", "passage", "plain", "snippet"]

#: A link target as written ("Settings", "img.png", "Folder/Note x.md") -> its vault-relative
#: path, or None when the vault has no such file.
Resolve = Callable[[str], str | None]

IMAGE_EXTENSIONS = frozenset({"png", "jpg", "jpeg", "gif", "webp", "svg", "bmp", "avif"})
#: The schemes a Markdown link may keep; anything else is shown as its text alone.
LINK_SCHEMES = frozenset({"http", "https", "mailto", "obsidian"})
UNRESOLVED_TITLE = "not in the vault"

# Keys of the per-render environment mistune carries in its BlockState (one per call, so a
# shared parser serves concurrent requests).
_RESOLVE = "vaultd.resolve"
_IN_LINK = "vaultd.in_link"
_IDS = "vaultd.heading_ids"


# --- Small pieces shared by the renderer -------------------------------------------------------


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def slug(text: str) -> str:
    """A heading's anchor: lowercased, spaces to '-', only [a-z0-9-]. A heading with no such
    character (CJK, emoji) gets a checksum instead, so that it still has an anchor and a
    `[[#heading]]` link still finds it."""
    folded = unicodedata.normalize("NFKD", text.strip()).lower()
    dashed = re.sub(r"\s+", "-", folded)
    kept = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "", dashed)).strip("-")
    return kept or f"h{zlib.crc32(text.strip().encode('utf-8')):08x}"


def _extension(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    return base.rsplit(".", 1)[-1].lower() if "." in base else ""


def _scheme(url: str) -> str | None:
    """The URL's scheme as a browser would read it, or None for a relative URL. Browsers drop
    control characters and whitespace inside a scheme (`java\\tscript:`), and a percent-encoded
    colon must not hide one either, so both readings are checked."""
    for candidate in (url, unquote(url)):
        squeezed = re.sub(r"[\x00-\x20\x7f]", "", candidate)
        found = re.match(r"([A-Za-z][A-Za-z0-9+.\-]*):", squeezed)
        if found:
            return found.group(1).lower()
    return None


def _foreign(url: str) -> bool:
    """A scheme-less URL that still leaves this origin (`//host/x`, `\\\\host\\x`)."""
    head = re.sub(r"[\x00-\x20\x7f]", "", url)[:2]
    return len(head) == 2 and head[0] in "/\\" and head[1] in "/\\"


def _note_href(path: str) -> str:
    return "#note/" + quote(path, safe="/")


def _file_src(path: str) -> str:
    return "/file/" + quote(path, safe="/")


def _tokens_text(tokens: Iterable[dict[str, Any]]) -> str:
    """The text a reader sees in parsed inline tokens (for alt text and heading anchors)."""
    parts: list[str] = []
    for token in tokens:
        kind = token["type"]
        if kind in ("softbreak", "linebreak"):
            parts.append(" ")
        elif kind in ("wikilink", "embed"):
            parts.append(_WikiTarget.parse(token["attrs"]["inner"]).shown)
        elif kind == "tag":
            parts.append("#" + token["raw"])
        elif "children" in token:
            parts.append(_tokens_text(token["children"]))
        elif kind in ("text", "codespan"):
            parts.append(html.unescape(token["raw"]) if kind == "text" else token["raw"])
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class _WikiTarget:
    """The parts of `[[note#sub|alias]]` and what Obsidian shows for it."""

    note: str
    sub: str
    alias: str

    @classmethod
    def parse(cls, inner: str) -> _WikiTarget:
        # Inside a table the alias bar is written `\|`, so that the table keeps its columns.
        target, _, alias = inner.replace("\\|", "|").partition("|")
        note, _, sub = target.partition("#")
        return cls(note.strip(), sub.strip(), alias.strip())

    @property
    def shown(self) -> str:
        if self.alias:
            return self.alias
        sub = " > ".join(part.strip() for part in self.sub.split("#") if part.strip())
        if not self.note:
            return sub
        return f"{self.note} > {sub}" if sub else self.note


# --- Obsidian's syntax as mistune rules --------------------------------------------------------

#: `[[...]]` and `![[...]]`: one line, no brackets inside.
_WIKILINK = r"\[\[(?P<wiki_inner>[^\[\]\n]+)\]\]"
_EMBED = r"!\[\[(?P<embed_inner>[^\[\]\n]+)\]\]"
#: `#tag` after a space, an opening bracket or an emphasis marker: never a URL's fragment
#: (`page#part`) nor a heading's `#` (taken by the block parser before this runs).
_TAG = r"(?<![^\s(*_=~])#(?P<tag_name>[\w/-]+)"
_COMMENT = r"%%[\s\S]+?%%"
#: `^block-id` ending a line of a paragraph: the anchor of a block reference, never shown.
_BLOCK_ID = r"(?<!\S)\^[A-Za-z0-9-]+(?=[ \t]*(?:\n|$))"
#: A comment whose `%%` opens a line and closes on a later one (may hold blank lines).
_BLOCK_COMMENT = r"^ {0,3}%%(?![^\n]*%%)"
_LINE_REST = re.compile(r"[ \t]*(?:\n|$)")
_CALLOUT = re.compile(r"\[!(?P<kind>[^\]\n]*)\](?P<fold>[+-]?)[ \t]*(?P<title>[^\n]*)(?:\n|$)")


def _parse_wikilink(inline: InlineParser, m: Match[str], state: InlineState) -> int:
    state.append_token({"type": "wikilink", "attrs": {"inner": m.group("wiki_inner")}})
    return m.end()


def _parse_embed(inline: InlineParser, m: Match[str], state: InlineState) -> int:
    state.append_token({"type": "embed", "attrs": {"inner": m.group("embed_inner")}})
    return m.end()


def _parse_tag(inline: InlineParser, m: Match[str], state: InlineState) -> int | None:
    name = m.group("tag_name")
    # Obsidian: a tag needs one character that is not a digit (`#123` is an issue number).
    if not re.search(r"[^\d/_-]", name):
        return None
    state.append_token({"type": "tag", "raw": name})
    return m.end()


def _parse_hidden(inline: InlineParser, m: Match[str], state: InlineState) -> int:
    return m.end()


def _parse_block_comment(block: BlockParser, m: Match[str], state: BlockState) -> int:
    close = state.src.find("%%", m.end(), state.cursor_max)
    if close < 0:
        # Obsidian hides an unclosed comment to the end of the note.
        return state.cursor_max
    end = close + 2
    rest = _LINE_REST.match(state.src, end, state.cursor_max)
    # Text after the closing `%%` on its line stays, as a paragraph of its own.
    return rest.end() if rest else end


def _callouts(md: mistune.Markdown, state: BlockState) -> None:
    _rewrite_callouts(state.tokens)


def _rewrite_callouts(tokens: list[dict[str, Any]]) -> None:
    for token in tokens:
        children = token.get("children")
        if isinstance(children, list):
            _rewrite_callouts(children)
        if token["type"] == "block_quote":
            _as_callout(token)


def _as_callout(token: dict[str, Any]) -> None:
    """A blockquote whose first line is `[!type]` becomes a callout. This runs before inline
    parsing, so the first paragraph's raw text is still there to read, and the title becomes a
    token of its own that mistune then parses inline like any paragraph."""
    children: list[dict[str, Any]] = token["children"]
    first = children[0] if children else None
    if not first or first["type"] != "paragraph" or "text" not in first:
        return
    m = _CALLOUT.match(first["text"].lstrip())
    if not m:
        return
    kind = re.sub(r"[^a-z0-9-]", "", m.group("kind").strip().lower()) or "note"
    body = children[1:]
    rest = first["text"].lstrip()[m.end() :]
    if rest.strip():
        body = [{"type": "paragraph", "text": rest}, *body]
    title = m.group("title").strip() or kind.capitalize()
    token["type"] = "callout"
    token["attrs"] = {"kind": kind, "fold": m.group("fold")}
    token["children"] = [{"type": "callout_title", "text": title}]
    if body:
        token["children"].append({"type": "callout_content", "children": body})


def _obsidian(md: mistune.Markdown) -> None:
    """Obsidian's syntax: the mistune plugin."""
    inline = md.inline
    # Before `link`, whose `[` and `![` would otherwise take the brackets.
    inline.register("embed", _EMBED, _parse_embed, before="link", start_chars="!")
    inline.register("wikilink", _WIKILINK, _parse_wikilink, before="link", start_chars="[")
    inline.register("comment", _COMMENT, _parse_hidden, start_chars="%")
    inline.register("block_id", _BLOCK_ID, _parse_hidden, start_chars="^")
    inline.register("tag", _TAG, _parse_tag, start_chars="#")
    md.block.register("block_comment", _BLOCK_COMMENT, _parse_block_comment)
    # Comments inside quotes (callouts) and lists too.
    md.block.block_quote_rules.append("block_comment")
    md.block.list_rules.append("block_comment")
    md.before_render_hooks.append(_callouts)


# --- Rendering ---------------------------------------------------------------------------------


class _Renderer(mistune.HTMLRenderer):
    """mistune's HTML renderer with Obsidian's tokens, and links checked against the vault.

    Links, images, wiki-links and headings need the call's own state (its `resolve`, whether
    they sit inside a link, the anchors given so far), which mistune hands to `render_token`
    only; those token types are rendered there."""

    _WITH_STATE = frozenset({"wikilink", "embed", "link", "image", "tag", "heading"})

    def __init__(self) -> None:
        super().__init__(escape=True)

    def render_token(self, token: dict[str, Any], state: BlockState) -> str:
        kind = token["type"]
        if kind not in self._WITH_STATE:
            return super().render_token(token, state)
        if kind == "heading":
            return self._heading(token, state)
        if kind == "tag":
            return self._tag(token["raw"], state)
        if kind in ("wikilink", "embed"):
            return self._wikilink(token["attrs"]["inner"], kind == "embed", state)
        if kind == "link":
            return self._link(token, state)
        return self._image(token, state)

    # mistune's own tokens, where they differ.

    def text(self, text: str) -> str:
        # Character references (`&amp;`, `&#106;`) are shown as the character they name, as in
        # Obsidian; escaped again, so `&lt;script&gt;` stays text.
        return html.escape(html.unescape(text), quote=False)

    def paragraph(self, text: str) -> str:
        # A paragraph that held only a block id or a comment leaves nothing behind.
        return "<p>" + text + "</p>\n" if text.strip() else ""

    def block_code(self, code: str, info: str | None = None) -> str:
        words = html.unescape(info or "").split()
        lang = re.sub(r"[^a-z0-9+#-]", "", words[0].lower())[:40] if words else ""
        attrs = f' class="language-{lang}"' if lang else ""
        return f"<pre><code{attrs}>{html.escape(code, quote=False)}</code></pre>\n"

    def table_cell(self, text: str, align: str | None = None, head: bool = False) -> str:
        tag = "th" if head else "td"
        # An `align` attribute rather than the table plugin's inline style, which the page's
        # policy (and the sanitizer) refuses.
        attrs = f' align="{align}"' if align in ("left", "center", "right") else ""
        return f"  <{tag}{attrs}>{text}</{tag}>\n"

    def callout(self, text: str, kind: str, fold: str) -> str:
        folded = f' data-callout-fold="{fold}"' if fold else ""
        return f'<div class="callout" data-callout="{_attr(kind)}"{folded}>\n{text}</div>\n'

    def callout_title(self, text: str) -> str:
        return f'<div class="callout-title">{text}</div>\n'

    def callout_content(self, text: str) -> str:
        return f'<div class="callout-content">\n{text}</div>\n'

    # Tokens rendered with the call's state.

    def _heading(self, token: dict[str, Any], state: BlockState) -> str:
        level = int(token["attrs"]["level"])
        text = self.render_tokens(token["children"], state)
        anchor = slug(_tokens_text(token["children"]))
        given: dict[str, int] = state.env.setdefault(_IDS, {})
        seen = given.get(anchor, 0)
        given[anchor] = seen + 1
        unique = anchor if not seen else f"{anchor}-{seen}"
        return f'<h{level} id="heading-{unique}">{text}</h{level}>\n'

    def _tag(self, name: str, state: BlockState) -> str:
        shown = html.escape("#" + name, quote=False)
        if state.env.get(_IN_LINK):
            return shown
        href = "#search?tag=" + quote(name, safe="")
        return f'<a class="tag" href="{_attr(href)}">{shown}</a>'

    def _wikilink(self, inner: str, embed: bool, state: BlockState) -> str:
        target = _WikiTarget.parse(inner)
        if embed:
            return self._embed(target, state)
        shown = html.escape(target.shown, quote=False)
        if state.env.get(_IN_LINK):
            return shown
        if not target.note:
            return self._same_note(target.sub, shown)
        path = self._resolve(target.note, state)
        return _internal(path, shown, "internal-link")

    def _embed(self, target: _WikiTarget, state: BlockState) -> str:
        path = self._resolve(target.note, state) if target.note else None
        size = re.fullmatch(r"(\d{1,5})(?:x(\d{1,5}))?", target.alias)
        name = target.note.rsplit("/", 1)[-1]
        if _extension(path or target.note) in IMAGE_EXTENSIONS:
            alt = target.alias if target.alias and not size else name
            width, height = (size.group(1), size.group(2)) if size else (None, None)
            return _image_html(path, alt, width, height)
        shown = target.shown if not size else _WikiTarget(target.note, target.sub, "").shown
        escaped = html.escape(shown, quote=False)
        if state.env.get(_IN_LINK):
            return escaped
        return _internal(path, escaped, "internal-link internal-embed")

    def _link(self, token: dict[str, Any], state: BlockState) -> str:
        url: str = token["attrs"]["url"]
        inside = bool(state.env.get(_IN_LINK))
        state.env[_IN_LINK] = True
        try:
            text = self.render_tokens(token["children"], state)
        finally:
            state.env[_IN_LINK] = inside
        if inside:
            return text
        scheme = _scheme(url)
        if scheme is not None or _foreign(url):
            if scheme not in LINK_SCHEMES:
                return text
            title = token["attrs"].get("title")
            titled = f' title="{_attr(title)}"' if title else ""
            return f'<a class="external-link" href="{_attr(url)}"{titled}>{text}</a>'
        if url.startswith("#"):
            return self._same_note(unquote(url[1:]), text)
        local = unquote(url.partition("#")[0])
        if not local.strip():
            return text
        return _internal(self._resolve(local, state), text, "internal-link")

    def _image(self, token: dict[str, Any], state: BlockState) -> str:
        url: str = token["attrs"]["url"]
        alt = _tokens_text(token["children"])
        # Obsidian's sizing in the alt text: `![alt|300](x.png)`, `![alt|100x145](x.png)`.
        sized = re.fullmatch(r"(.*?)\|\s*(\d{1,5})(?:x(\d{1,5}))?\s*", alt, re.S)
        if sized:
            alt = sized.group(1)
        scheme = _scheme(url)
        if scheme is not None or _foreign(url):
            # An image from elsewhere is never fetched: the page shows a link to it instead.
            if scheme not in ("http", "https") or state.env.get(_IN_LINK):
                return html.escape(alt, quote=False)
            shown = html.escape(alt or "image", quote=False)
            return f'<a class="external-image" href="{_attr(url)}">{shown}</a>'
        local = unquote(url.partition("#")[0])
        path = self._resolve(local, state) if local.strip() else None
        name = alt or local.rsplit("/", 1)[-1]
        if _extension(path or local) in IMAGE_EXTENSIONS:
            width, height = (sized.group(2), sized.group(3)) if sized else (None, None)
            return _image_html(path, name, width, height)
        escaped = html.escape(name, quote=False)
        if state.env.get(_IN_LINK):
            return escaped
        return _internal(path, escaped, "internal-link internal-embed")

    @staticmethod
    def _same_note(sub: str, shown: str) -> str:
        heading = sub.split("#")[-1].strip()
        if not heading or heading.startswith("^"):
            # A block of this note: nothing on the page to jump to.
            return f'<span class="internal-link">{shown}</span>'
        return f'<a class="internal-link" href="#heading-{slug(heading)}">{shown}</a>'

    @staticmethod
    def _resolve(target: str, state: BlockState) -> str | None:
        resolve: Resolve | None = state.env.get(_RESOLVE)
        return resolve(target) if resolve is not None else None


def _internal(path: str | None, shown: str, classes: str) -> str:
    """A link to a note of the vault, or the text marked unresolved when there is none."""
    if path is None:
        return f'<span class="{classes} is-unresolved" title="{UNRESOLVED_TITLE}">{shown}</span>'
    return (
        f'<a class="{classes}" href="{_attr(_note_href(path))}" data-path="{_attr(path)}">'
        f"{shown}</a>"
    )


def _image_html(path: str | None, alt: str, width: str | None, height: str | None) -> str:
    """An image of the vault (its width and height as digits, each maybe absent), or its name
    marked unresolved."""
    if path is None:
        return (
            f'<span class="embed is-unresolved" title="{UNRESOLVED_TITLE}">'
            f"{html.escape(alt, quote=False)}</span>"
        )
    dims = (f' width="{width}"' if width else "") + (f' height="{height}"' if height else "")
    return (
        f'<img class="embed" src="{_attr(_file_src(path))}" alt="{_attr(alt)}"{dims} '
        'loading="lazy">'
    )


_MARKDOWN = mistune.create_markdown(
    escape=True,
    renderer=_Renderer(),
    plugins=["table", "strikethrough", "mark", "task_lists", "footnotes", "url", _obsidian],
)


# --- The sanitizer -----------------------------------------------------------------------------

_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_TAGS = {
    *("a", "p", "br", "hr", "ul", "ol", "li", "blockquote", "pre", "code"),
    *("em", "strong", "del", "mark", "s", "sup", "sub", "img", "span", "div", "input"),
    *("table", "thead", "tbody", "tr", "th", "td", "section"),
    *_HEADINGS,
}
_ATTRIBUTES: dict[str, set[str]] = {
    "a": {"href", "title", "class", "data-path"},
    "img": {"src", "alt", "width", "height", "class", "loading"},
    "span": {"class", "title"},
    "div": {"class", "data-callout", "data-callout-fold"},
    "code": {"class"},
    "li": {"class", "id"},
    "sup": {"class", "id"},
    "section": {"class"},
    "td": {"align"},
    "th": {"align"},
    "input": {"type", "checked", "disabled"},
    "ol": {"start"},
    **{h: {"id"} for h in _HEADINGS},
}
#: Every class this module (or a mistune plugin it uses) writes; any other is dropped.
_CLASSES = frozenset(
    {
        *("internal-link", "internal-embed", "is-unresolved", "embed", "tag"),
        *("external-link", "external-image", "callout", "callout-title", "callout-content"),
        *("task-list-item", "task-list-item-checkbox", "footnotes", "footnote-ref", "footnote"),
    }
)
#: Per attribute, the values it may take (checked after the allow-list).
_VALUES = {
    "id": re.compile(r"heading-[a-z0-9-]+|fn-\d+|fnref-\d+"),
    "width": re.compile(r"\d{1,5}"),
    "height": re.compile(r"\d{1,5}"),
    "start": re.compile(r"\d{1,9}"),
    "align": re.compile(r"left|center|right"),
    "loading": re.compile(r"lazy"),
    "data-callout": re.compile(r"[a-z0-9-]+"),
    "data-callout-fold": re.compile(r"[+-]"),
    "checked": re.compile(r".*"),
    "disabled": re.compile(r".*"),
}


_LANGUAGE_CLASS = re.compile(r"language-[a-z0-9+#-]+")


def _attribute(tag: str, name: str, value: str) -> str | None:
    """The sanitizer's last word on one attribute: its value as kept, or None to drop it."""
    if name == "class":
        kept = [c for c in value.split() if c in _CLASSES or _LANGUAGE_CLASS.fullmatch(c)]
        return " ".join(kept) or None
    if name == "href":
        ok = value.startswith("#") or _scheme(value) in LINK_SCHEMES
        return value if ok else None
    if name == "src":
        # Only this server's files: the page never asks another origin for anything.
        return value if value.startswith("/file/") and not _foreign(value) else None
    if name == "type":
        return "checkbox"
    pattern = _VALUES.get(name)
    if pattern is not None:
        return value if pattern.fullmatch(value) else None
    return value


def _clean(fragment: str) -> str:
    return nh3.clean(
        fragment,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        attribute_filter=_attribute,
        url_schemes=set(LINK_SCHEMES),
        link_rel="noopener noreferrer",
        strip_comments=True,
    )


# --- The public functions ----------------------------------------------------------------------


def passage(text: str, resolve: Resolve | None = None) -> str:
    """A note's passage (Markdown) as sanitized HTML.

    Rendered as Obsidian renders it: CommonMark with tables, strikethrough, `==highlights==`,
    task lists, footnotes and bare URLs; wiki-links and embeds resolved through `resolve` (none
    resolves without it), tags, callouts, heading anchors (`id="heading-<slug>"`), block ids
    and `%%comments%%` hidden. The note's own HTML is shown as text.
    """
    state = BlockState()
    state.env[_RESOLVE] = resolve
    rendered, _ = _MARKDOWN.parse(text, state)
    return _clean(cast(str, rendered))


# --- Plain text for snippets -------------------------------------------------------------------

_QUOTE = re.compile(r"[ \t]*+(?:>[ \t]?)+")
_FENCE = re.compile(r"[ \t]*+(`{3,}|~{3,})")
_HEADING = re.compile(r"#{1,6}(?:[ \t]+|$)")
_SNIPPET_LEAD = re.compile(r"…([ \t]*)(?:>[ \t]?)*")
_CALLOUT_MARK = re.compile(r"\[!(?P<kind>[^\]\n]*)\][+-]?")
#: A thematic break, a setext underline or a table's delimiter row: nothing a reader sees.
#: (Possessive indents and a `|` between cells: no line can be matched in many ways, which
#: made long indents or dashes cost time growing with the square or worse.)
_RULE_LINE = re.compile(
    r"[ \t]*+(?:(?:[-*_][ \t]*){3,}|=+[ \t]*"
    r"|\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*)"
)
_LINE_BLOCK_ID = re.compile(r"(?<!\S)\^[A-Za-z0-9-]+[ \t]*$")
#: A link's destination and title; `<...>` only as a whole, so that no `<` can be read two ways
#: (which made the match exponential on `[a](<a><a>...`).
_DESTINATION = (
    r"\((?:<[^<>\n]*>|(?:[^()\s<]|\([^()\s]*\))*)"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'))?[ \t]*\)"
)
_INLINE = re.compile(
    r"(?P<escape>\\[!-/:-@\[-`{-~])"
    r"|(?P<ticks>`+)"
    r"|(?P<comment>%%[\s\S]*?%%)|(?P<lone>%%)"
    r"|(?P<wikilink>!?\[\[(?P<inner>[^\[\]\n]+)\]\])"
    r"|(?P<image>!\[(?P<alt>[^\[\]\n]*)\]" + _DESTINATION + ")"
    r"|(?P<link>\[(?P<label>[^\[\]\n]*)\]" + _DESTINATION + ")"
    r"|(?P<emphasis>\*+|_+|~~+|==+)"
)


class _Shown:
    """Which code points of a Markdown text a reader would see: all, until syntax is taken out."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.kept = [True] * len(text)
        #: Where each run of backticks starts, by its width (a code span closes on the next
        #: run of its opening's width).
        self._ticks: dict[int, list[int]] = {}
        for run in re.finditer(r"`+", text):
            self._ticks.setdefault(len(run.group(0)), []).append(run.start())

    def drop(self, start: int, end: int) -> None:
        self.kept[start:end] = [False] * (end - start)

    def lines(self) -> None:
        """Take out what opens or fills a line: quote and callout markers, heading marks, code
        fences, rules, trailing block ids; then the inline syntax of every line outside code."""
        fence: str | None = None
        run_start: int | None = None
        pos = 0
        for line in self.text.splitlines(keepends=True):
            end = pos + len(line.rstrip("\r\n"))
            body = self._quote(pos, end)
            opening = _FENCE.match(self.text, body, end)
            if fence is not None or opening:
                if run_start is not None:
                    self.inline(run_start, pos)
                    run_start = None
                fence = self._fence(fence, opening, body, end)
            else:
                self._line(body, end)
                run_start = pos if run_start is None else run_start
            pos += len(line)
        if run_start is not None:
            self.inline(run_start, len(self.text))

    def _quote(self, start: int, end: int) -> int:
        m = _QUOTE.match(self.text, start, end)
        if m and ">" in m.group(0):
            self.drop(start, m.end())
            return m.end()
        return start

    def _fence(
        self, fence: str | None, opening: Match[str] | None, body: int, end: int
    ) -> str | None:
        """A line in or around fenced code: the fences are dropped, the code kept as it is.
        Returns the fence still open after the line (its backticks or tildes), or None."""
        if opening is None:
            return fence
        if fence is None:
            self.drop(body, end)
            return opening.group(1)
        # A closing fence: the opening's character, at least as many, nothing after.
        if opening.group(1).startswith(fence) and not self.text[opening.end() : end].strip():
            self.drop(body, end)
            return None
        return fence

    def _line(self, body: int, end: int) -> None:
        if _RULE_LINE.fullmatch(self.text, body, end) and self.text[body:end].strip():
            self.drop(body, end)
            return
        # A snippet may begin inside a callout's first line, after its "…".
        lead = _SNIPPET_LEAD.match(self.text, body, end)
        callout = _CALLOUT_MARK.match(self.text, lead.end() if lead else body, end)
        if callout:
            start = lead.end(1) if lead else body  # the "…" and its space stay
            if self.text[callout.end() : end].strip():
                self.drop(start, callout.end())
            else:
                # No title: the type's word stands for it, as Obsidian shows it.
                self.drop(start, callout.start("kind"))
                self.drop(callout.end("kind"), callout.end())
        heading = _HEADING.match(self.text, body, end)
        if heading:
            self.drop(body, heading.end())
        block_id = _LINE_BLOCK_ID.search(self.text, body, end)
        if block_id:
            self.drop(block_id.start(), block_id.end())

    def inline(self, start: int, end: int) -> None:
        """Take out inline syntax between `start` and `end`, keeping what a reader sees."""
        pos = start
        while (m := _INLINE.search(self.text, pos, end)) is not None:
            pos = m.end()
            kind = m.lastgroup
            if kind == "escape":
                self.drop(m.start(), m.start() + 1)
            elif kind == "ticks":
                pos = self._code(m.start(), m.end(), end)
            elif kind in ("comment", "lone"):
                self.drop(m.start(), m.end())
            elif kind == "wikilink":
                self._wikilink(m)
            elif kind == "image":
                self._link(m, "alt")
            elif kind == "link":
                self._link(m, "label")
            elif kind == "emphasis":
                self._emphasis(m.start(), m.end())

    def _code(self, start: int, end: int, limit: int) -> int:
        """A code span opened by the backticks at [start, end): its backticks dropped, its text
        kept as written. Returns where scanning goes on (after the span, or after backticks
        that close nothing, which stay)."""
        width = end - start
        starts = self._ticks.get(width, [])
        at = bisect.bisect_right(starts, start)
        # The closing run is the next one of the same width (looked up, not searched, so that
        # many unclosed runs cost no more than one pass).
        if at == len(starts) or starts[at] + width > limit:
            return end
        close = starts[at]
        self.drop(start, end)
        self.drop(close, close + width)
        return close + width

    def _wikilink(self, m: Match[str]) -> None:
        inner_start, inner_end = m.span("inner")
        inner = m.group("inner")
        embed = m.group("wikilink").startswith("!")
        if embed and _extension(inner.split("|", 1)[0].split("#", 1)[0]) in IMAGE_EXTENSIONS:
            # A picture (a screenshot, an icon like `lucide-x.svg#icon`) has no words to read.
            self.drop(m.start(), m.end())
            return
        bar = inner.find("|")
        shown = (inner_start, inner_end)
        if bar >= 0:
            alias = inner[bar + 1 :]
            target_end = inner_start + bar - (1 if bar and inner[bar - 1] == "\\" else 0)
            if not embed and alias.strip():
                shown = (inner_start + bar + 1, inner_end)
            else:
                shown = (inner_start, target_end)
        if self.text[shown[0]] == "#":
            shown = (shown[0] + 1, shown[1])
        self.drop(m.start(), shown[0])
        self.drop(shown[1], m.end())

    def _link(self, m: Match[str], group: str) -> None:
        self.drop(m.start(), m.start(group))
        self.drop(m.end(group), m.end())
        if group == "label":
            # A link's text may itself hold emphasis, code or a comment.
            self.inline(m.start(group), m.end(group))

    def _emphasis(self, start: int, end: int) -> None:
        """Drop a run of `*`, `_`, `~~` or `==` when it opens or closes emphasis: it touches a
        word on one side. `snake_case`, `2 * 3` and a list's `* ` bullet keep theirs."""
        before = self.text[start - 1] if start > 0 else " "
        after = self.text[end] if end < len(self.text) else " "
        if before.isspace() and after.isspace():
            return
        if self.text[start] == "_" and before.isalnum() and after.isalnum():
            return
        if not self._paired(start, end, opens=not after.isspace(), closes=not before.isspace()):
            return  # `window.__flag`, a lone `*`: no emphasis without its other half
        self.drop(start, end)

    def _paired(self, start: int, end: int, *, opens: bool, closes: bool) -> bool:
        """Whether the run at [start, end) has its other half on its line: after it for an
        opening run, before it for a closing one, either side for one inside a word."""
        run = self.text[start:end]
        line_start = self.text.rfind("\n", 0, start) + 1
        line_end = self.text.find("\n", end)
        line_end = len(self.text) if line_end < 0 else line_end
        # The other half must be able to act as one: a closer touches a word on its left, an
        # opener on its right (the `*` of `3 * 4` is neither).
        pattern = re.compile(re.escape(run))
        later = any(
            not self.text[m.start() - 1].isspace()
            for m in pattern.finditer(self.text, end, line_end)
        )
        earlier = any(
            m.end() < line_end and not self.text[m.end()].isspace()
            for m in pattern.finditer(self.text, line_start, start)
        )
        if opens and not closes:
            return later
        if closes and not opens:
            return earlier
        return later or earlier

    def display(self) -> tuple[str, list[int]]:
        """The kept code points, each whitespace run (newlines too) as one space, trimmed."""
        chars: list[str] = []
        sources: list[int] = []
        for index, char in enumerate(self.text):
            if not self.kept[index]:
                continue
            if char.isspace():
                if not chars or chars[-1] == " ":
                    continue
                char = " "
            chars.append(char)
            sources.append(index)
        if chars and chars[-1] == " ":
            chars.pop()
            sources.pop()
        return "".join(chars), sources


def plain(text: str) -> tuple[str, list[int]]:
    """Markdown made plain-text-like for reading (syntax removed) and, for each code point of
    the result, its index in `text` (so that match ranges in `text` can be carried over).

    Only ever removes code points (and turns a whitespace run into one space), so the result
    reads as the source with its syntax taken out: `[[t|shown]]` -> `shown`, `[text](url)` ->
    `text`, `**b**` -> `b`, `> [!tip] Title` -> `Title`, `%%comments%%`, code fences,
    backticks and `^block-ids` gone.
    """
    shown = _Shown(text)
    shown.lines()
    return shown.display()


def snippet(text: str, highlights: Sequence[Sequence[int]] = ()) -> str:
    """A short search snippet as plain-text-like sanitized HTML with exactly the given match
    ranges in <mark>.

    `highlights` are [start, end) ranges of code points in `text`; a shown code point is
    marked when its place in `text` lies in one. A range over syntax only (`**`) marks
    nothing; one outside `text` is clipped.
    """
    display, sources = plain(text)
    covered = [False] * len(text)
    for pair in highlights:
        if len(pair) != 2:
            continue
        start, end = max(0, int(pair[0])), min(len(text), int(pair[1]))
        covered[start:end] = [True] * max(0, end - start)
    parts: list[str] = []
    run_start = 0
    for index in range(1, len(display) + 1):
        if index < len(display) and covered[sources[index]] == covered[sources[run_start]]:
            continue
        run = html.escape(display[run_start:index], quote=False)
        parts.append(f"<mark>{run}</mark>" if covered[sources[run_start]] else run)
        run_start = index
    return nh3.clean("".join(parts), tags={"mark"}, attributes={}, link_rel=None)


_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？]")


def cut(text: str, limit: int = 200) -> str:
    """`text` (plain) cut to at most `limit` characters at a sentence end, else a word boundary,
    with '…' when cut.

    A sentence end is kept when it keeps at least half the limit; a word longer than the
    limit is the only thing ever cut inside. The '…' counts in the limit.
    """
    if len(text) <= limit:
        return text
    if limit <= 1:
        return "…"[:limit]
    room = limit - 1
    # One code point past the room, so that the look-ahead sees what follows a final '.'.
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, room + 1) if m.end() <= room]
    if ends and ends[-1] >= limit / 2:
        return text[: ends[-1]] + "…"
    # The last whitespace at or before `room`: text[:space] is whole words.
    space = next((i for i in range(room, 0, -1) if text[i].isspace()), 0)
    head = text[:space] if space else text[:room]
    return head.rstrip(" \t\n,;:") + "…"
