"""A file's bytes become a parsed `Note`: frontmatter, title, aliases, tags, links and blocks.

Structure (headings, code, lists, tables, HTML blocks, math) comes from mistune's block parser,
instrumented so every top-level block knows its line range in the file as the user sees it.
Inline syntax that hides text from Obsidian (code spans, comments, math) is masked before tags
and links are collected, so `#not-a-tag` inside code never becomes a tag.

What is skipped and what is kept (documented in docs/parsing.md):
- NUL bytes, or mostly undecodable bytes: the note is skipped (`LeftOutError`, a `NoteError`).
- A few invalid UTF-8 sequences: replaced with U+FFFD and recorded in `Note.errors`.
- Larger than `max_bytes`: skipped (`LeftOutError`).
- Invalid or oversized frontmatter: recorded in `Note.errors`; the body is still indexed.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any, ClassVar
from urllib.parse import unquote

import mistune
import yaml
from frontmatter.default_handlers import YAMLHandler
from mistune.block_parser import BlockParser
from mistune.core import BlockState
from mistune.plugins.math import math as math_plugin
from mistune.plugins.table import table as table_plugin

from vaultd.errors import LeftOutError, NoteError
from vaultd.records import Block, BlockKind, Link, Note

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
#: Frontmatter beyond this is not parsed: real notes carry a few hundred bytes.
MAX_FRONTMATTER_BYTES = 256 * 1024
#: Values visited when converting frontmatter; stops YAML alias bombs from expanding.
MAX_FRONTMATTER_NODES = 10_000
MAX_FRONTMATTER_DEPTH = 32
#: Share of U+FFFD above which a file is treated as binary rather than text.
MAX_REPLACEMENT_RATIO = 0.05

_FRONTMATTER_OPEN = re.compile(r"---[ \t]*\n")
_FRONTMATTER_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)

# Inline regions Obsidian does not read tags or links from. Alternation order matters only at
# equal start positions; the leftmost region wins, as in a left-to-right reader.
_INLINE_HIDDEN = re.compile(
    r"(?P<code>(?P<ticks>`+)(?:(?!(?P=ticks)).)+?(?P=ticks)(?!`))"
    r"|(?P<comment><!--.*?-->)"
    r"|(?P<obsidian>%%.*?(?:%%|\Z))"
    r"|(?P<math>\$\$(?:(?!\n[ \t]*\n).)+?\$\$|\$(?=[^\s$])[^$\n]*?(?<=[^\s\\])\$)"
    r"|(?P<url>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s<>()\[\]]+)",
    re.DOTALL,
)
# Obsidian: a tag starts after whitespace or at the start of a line; letters of any script,
# digits, `_`, `-` and `/`; at least one character that is not a digit.
_INLINE_TAG = re.compile(r"(?<![^\s])#([\w/\-]+)", re.MULTILINE)
_WIKILINK = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")
_MD_LINK = re.compile(
    r"(!?)\[(?:[^\[\]\n]|\[[^\]\n]*\])*\]\(\s*(<[^>\n]+>|[^)\s]+)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)"
)
_URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
_TAG_SPLIT = re.compile(r"[\s,]+")
_ATX_TRAILER = re.compile(r"[ \t]+#+[ \t]*$")

_KIND: dict[str, BlockKind] = {
    "heading": "heading",
    "paragraph": "paragraph",
    "block_code": "code",
    "block_quote": "quote",
    "table": "table",
    "nptable": "table",
    "list": "list",
    "block_html": "html",
    "block_math": "math",
    "thematic_break": "rule",
}
# Tokens that carry nothing a reader sees.
_SKIPPED_TOKENS = frozenset({"blank_line", "ref_link"})


class _PositionedState(BlockState):
    """A block state that stamps each top-level token with the offset where it starts."""

    block_start: int | None = None

    def _stamp(self, token: dict[str, Any]) -> None:
        if self.parent is None:
            token["_start"] = self.block_start if self.block_start is not None else self.cursor

    def append_token(self, token: dict[str, Any]) -> None:
        self._stamp(token)
        super().append_token(token)

    def prepend_token(self, token: dict[str, Any]) -> None:
        self._stamp(token)
        super().prepend_token(token)

    def add_paragraph(self, text: str) -> None:
        last = self.last_token()
        if self.parent is None and not (last and last["type"] == "paragraph"):
            self.tokens.append({"type": "paragraph", "text": text, "_start": self.cursor})
        else:
            super().add_paragraph(text)


class _PositionedParser(BlockParser):
    state_cls: ClassVar[type[BlockState]] = _PositionedState  # type: ignore[misc]

    def parse_ref_link(self, m: re.Match[str], state: BlockState) -> int | None:
        # `[^1]: text` is an Obsidian footnote, not a link reference: read as one (a single
        # word, or a `<...>` "destination"), its text was dropped from the note, and so was
        # every footnote after it.
        if m.group("reflink_1").startswith("^"):
            return None
        return super().parse_ref_link(m, state)

    def parse_method(self, m: re.Match[str], state: BlockState) -> int | None:
        if isinstance(state, _PositionedState) and state.parent is None:
            # Block quotes parse the blank line that ends them from inside their own call.
            outer, state.block_start = state.block_start, m.start()
            count = len(state.tokens)
            try:
                return super().parse_method(m, state)
            finally:
                state.block_start = outer
                # A list ended by another block (a heading, a fence...) is inserted by mistune
                # with `tokens.insert`, bypassing append_token: stamp it here or it is lost.
                for token in state.tokens[count:]:
                    token.setdefault("_start", m.start())
        return super().parse_method(m, state)


def _markdown() -> mistune.Markdown:
    return mistune.Markdown(block=_PositionedParser(), plugins=[table_plugin, math_plugin])


_MARKDOWN = _markdown()


def decode(data: bytes, path: str) -> tuple[str, list[str]]:
    """Bytes to text with LF line endings; raises NoteError for content that is not text."""
    errors: list[str] = []
    if b"\x00" in data:
        raise LeftOutError(path, "binary content (NUL bytes); not a text note, skipped", "binary")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        bad = text.count("\ufffd")
        if bad > max(16, len(text) * MAX_REPLACEMENT_RATIO):
            raise LeftOutError(
                path, f"not UTF-8 text ({bad} undecodable sequences); skipped", "not_utf8"
            ) from exc
        errors.append(f"invalid UTF-8 at byte {exc.start}: {bad} sequence(s) replaced with U+FFFD")
    # One logical line per physical line whatever the platform wrote, so numbers match editors.
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, errors


def check_size(path: str, data: bytes, max_bytes: int) -> None:
    """Raise LeftOutError ("too_big") for a file over the note's cap (`[vault] max_file_mb`)."""
    if len(data) > max_bytes:
        raise LeftOutError(
            path,
            f"{len(data) / 1048576:.1f} MiB is over the {max_bytes / 1048576:.0f} MiB "
            "limit ([vault] max_file_mb); skipped",
            "too_big",
        )


def parse_note(path: str, data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Note:
    """Parse one note. Raises only `NoteError`, for content that must not be indexed."""
    check_size(path, data, max_bytes)
    try:
        text, errors = decode(data, path)
        return _parse_text(unicodedata.normalize("NFC", path), text, errors)
    except NoteError:
        raise
    except RecursionError as exc:
        raise NoteError(f"{path}: structure nested too deeply to parse; skipped") from exc
    except Exception as exc:  # a parser bug must cost one note, never the run
        raise NoteError(f"{path}: cannot parse ({type(exc).__name__}: {exc}); skipped") from exc


def _parse_text(path: str, text: str, errors: list[str]) -> Note:
    frontmatter, body, body_start_line = _split_frontmatter(text, errors)
    blocks, masked = _blocks(body, body_start_line)
    title = _title(frontmatter, blocks, path)
    tags = _frontmatter_tags(frontmatter) | _inline_tags(masked)
    links = _frontmatter_links(frontmatter) + _body_links(masked, path, body_start_line)
    return Note(
        path=path,
        title=title,
        aliases=_aliases(frontmatter),
        tags=tuple(sorted(tags)),
        links=tuple(links),
        frontmatter=frontmatter,
        body=body,
        body_start_line=body_start_line,
        blocks=tuple(blocks),
        errors=tuple(errors),
    )


# -- frontmatter ---------------------------------------------------------------------------------


def _split_frontmatter(text: str, errors: list[str]) -> tuple[dict[str, Any], str, int]:
    opening = _FRONTMATTER_OPEN.match(text)
    if not opening:
        return {}, text, 1
    closing = _FRONTMATTER_CLOSE.search(text, opening.end())
    if not closing:
        errors.append("frontmatter: opening '---' is never closed; the whole file is the body")
        return {}, text, 1
    raw = text[opening.end() : closing.start()]
    body_offset = closing.end() + 1 if closing.end() < len(text) else closing.end()
    body_start_line = text.count("\n", 0, body_offset) + 1
    body = text[body_offset:]
    if len(raw) > MAX_FRONTMATTER_BYTES:
        errors.append(f"frontmatter: {len(raw)} bytes is over the {MAX_FRONTMATTER_BYTES} limit")
        return {}, body, body_start_line
    try:
        loaded = YAMLHandler().load(raw) if raw.strip() else {}
    except yaml.YAMLError as exc:
        errors.append(f"frontmatter: invalid YAML: {' '.join(str(exc).split())}")
        return {}, body, body_start_line
    except (ValueError, TypeError, RecursionError) as exc:
        # e.g. a date that does not exist (2023-02-30) or absurd nesting.
        errors.append(f"frontmatter: invalid value: {exc}")
        return {}, body, body_start_line
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, Mapping):
        errors.append(f"frontmatter: expected key: value pairs, got a {type(loaded).__name__}")
        return {}, body, body_start_line
    budget = [MAX_FRONTMATTER_NODES]
    try:
        clean = _json_safe(loaded, budget, 0)
    except _TooComplex:
        errors.append(
            f"frontmatter: more than {MAX_FRONTMATTER_NODES} values or nested deeper than "
            f"{MAX_FRONTMATTER_DEPTH} (YAML aliases?); ignored"
        )
        return {}, body, body_start_line
    assert isinstance(clean, dict)
    return clean, body, body_start_line


class _TooComplex(Exception):
    pass


def _json_safe(value: Any, budget: list[int], depth: int) -> Any:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_FRONTMATTER_DEPTH:
        raise _TooComplex
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_safe(v, budget, depth + 1) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _aliases(frontmatter: Mapping[str, Any]) -> tuple[str, ...]:
    raw = frontmatter.get("aliases", frontmatter.get("alias"))
    items = [raw] if isinstance(raw, str | int | float) else raw if isinstance(raw, list) else []
    seen: dict[str, None] = {}
    for item in items:
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            alias = str(item).strip()
            if alias:
                seen.setdefault(alias, None)
    return tuple(seen)


def _normal_tag(raw: str) -> str | None:
    tag = raw.strip().lstrip("#").strip("/").lower()
    if not tag or not re.fullmatch(r"[\w/\-]+", tag) or tag.replace("/", "").isdigit():
        return None
    return tag


def _frontmatter_tags(frontmatter: Mapping[str, Any]) -> set[str]:
    tags: set[str] = set()
    for key in ("tags", "tag"):
        raw = frontmatter.get(key)
        if isinstance(raw, str):
            items: list[Any] = _TAG_SPLIT.split(raw)
        elif isinstance(raw, list):
            items = [p for item in raw if item is not None for p in _TAG_SPLIT.split(str(item))]
        elif isinstance(raw, int | float) and not isinstance(raw, bool):
            items = [str(raw)]
        else:
            continue
        for item in items:
            tag = _normal_tag(str(item))
            if tag:
                tags.add(tag)
    return tags


# -- body structure ------------------------------------------------------------------------------


def _blocks(body: str, first_line: int) -> tuple[list[Block], str]:
    """Top-level blocks with file line numbers, and the body with hidden regions blanked."""
    source = body if body.endswith("\n") else body + "\n"
    state = _PositionedState()
    state.process(source)
    _MARKDOWN.block.parse(state)

    line_starts = [0]
    line_starts.extend(m.end() for m in re.finditer("\n", source))
    lines = source.split("\n")
    tokens = [t for t in state.tokens if "_start" in t]
    tokens.sort(key=lambda t: t["_start"])

    masked = list(source)
    blocks: list[Block] = []
    for position, token in enumerate(tokens):
        kind_name = token["type"]
        start = token["_start"]
        end = tokens[position + 1]["_start"] if position + 1 < len(tokens) else len(source)
        if kind_name in _SKIPPED_TOKENS or end <= start:
            continue
        first = bisect.bisect_right(line_starts, start) - 1
        last = bisect.bisect_right(line_starts, end - 1) - 1
        while last > first and not lines[last].strip():
            last -= 1
        kind = _KIND.get(kind_name, "other")
        if kind in ("code", "math", "html"):
            # Obsidian reads no tags or links in code, math or raw HTML.
            for i in range(start, end):
                if masked[i] != "\n":
                    masked[i] = " "
        text = "\n".join(lines[first : last + 1])
        if not text.strip():
            continue
        level = 0
        info = ""
        if kind == "heading":
            level = int(token.get("attrs", {}).get("level", 1))
            info = _heading_text(token.get("text", ""))
        elif kind == "code":
            info = str(token.get("attrs", {}).get("info", "") or "").split(" ")[0]
        blocks.append(
            Block(
                kind=kind,
                start_line=first + first_line,
                end_line=last + first_line,
                text=text,
                level=level,
                info=info,
            )
        )
    comments: list[tuple[int, int]] = []

    def blank(match: re.Match[str]) -> str:
        hidden = match.group(0)
        if match.group("comment") or (
            match.group("obsidian") and len(hidden) >= 4 and hidden.endswith("%%")
        ):
            comments.append(match.span())
        return _blank(match)

    masked_text = _INLINE_HIDDEN.sub(blank, "".join(masked))
    kept = _drop_invisible(blocks, masked_text, comments, line_starts, first_line)
    return kept, masked_text


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def _drop_invisible(
    blocks: list[Block],
    masked: str,
    comments: list[tuple[int, int]],
    line_starts: list[int],
    first_line: int,
) -> list[Block]:
    """Drop blocks a reader never sees: comments, rules, bare link definitions."""
    comment_starts = [start for start, _ in comments]
    kept: list[Block] = []
    for block in blocks:
        if block.kind == "rule":
            continue
        start = line_starts[block.start_line - first_line]
        end_index = block.end_line - first_line + 1
        end = line_starts[end_index] if end_index < len(line_starts) else len(masked)
        if block.kind in ("paragraph", "html", "other"):
            visible = masked[start:end]
            stripped = block.text.strip()
            is_comment = (stripped.startswith("%%") or stripped.startswith("<!--")) and not (
                visible.strip()
            )
            if is_comment:
                continue
        # A closed comment can span blank lines and so hold whole blocks (paragraphs, headings,
        # code): those are hidden in Obsidian and must not become chunks or sections.
        first = start + len(block.text) - len(block.text.lstrip())
        last = first + len(block.text.strip()) - 1
        around = bisect.bisect_right(comment_starts, first) - 1
        if around >= 0 and comments[around][1] > last:
            continue
        kept.append(block)
    return kept


def _heading_text(raw: str) -> str:
    text = _ATX_TRAILER.sub("", raw.strip()).strip()
    return " ".join(text.split())


def _title(frontmatter: Mapping[str, Any], blocks: list[Block], path: str) -> str:
    raw = frontmatter.get("title")
    if isinstance(raw, str | int | float) and not isinstance(raw, bool) and str(raw).strip():
        return str(raw).strip()
    for block in blocks:
        if block.kind == "heading" and block.level == 1 and block.info:
            return block.info
    name = PurePosixPath(path).name
    return name[:-3] if name.lower().endswith(".md") else name


# -- tags and links ------------------------------------------------------------------------------


def _inline_tags(masked: str) -> set[str]:
    tags: set[str] = set()
    for match in _INLINE_TAG.finditer(masked):
        tag = _normal_tag(match.group(1))
        if tag:
            tags.add(tag)
    return tags


def _wikilink(embed: bool, inner: str, own_name: str) -> Link | None:
    inner = inner.replace("\\|", "|")  # escaped pipes in tables
    target, _, alias = inner.partition("|")
    target, _, anchor = target.partition("#")
    target = target.strip()
    heading = block = None
    anchor = anchor.strip()
    if anchor.startswith("^"):
        block = anchor[1:].strip() or None
    elif anchor:
        heading = anchor
    if not target:
        if heading is None and block is None:
            return None
        target = own_name  # [[#Heading]] points into the note itself
    return Link(
        target=target, heading=heading, block=block, alias=alias.strip() or None, embed=embed
    )


def _own_name(path: str) -> str:
    name = PurePosixPath(path).name
    return name[:-3] if name.lower().endswith(".md") else name


def _frontmatter_links(frontmatter: Mapping[str, Any]) -> list[Link]:
    links: list[Link] = []
    for value in _strings(frontmatter):
        for match in _WIKILINK.finditer(value):
            link = _wikilink(bool(match.group(1)), match.group(2), "")
            if link is not None and link.target:
                links.append(link)
    return links


def _body_links(masked: str, path: str, first_line: int) -> list[Link]:
    own = _own_name(path)
    found: list[tuple[int, Link]] = []
    for match in _WIKILINK.finditer(masked):
        link = _wikilink(bool(match.group(1)), match.group(2), own)
        if link is not None:
            found.append((match.start(), link))
    for match in _MD_LINK.finditer(masked):
        link = _markdown_link(bool(match.group(1)), match.group(2), own)
        if link is not None:
            found.append((match.start(), link))
    found.sort(key=lambda item: item[0])
    # Hidden regions are blanked in place, so offsets in `masked` are offsets in the body.
    newlines = [m.start() for m in re.finditer("\n", masked)] if found else []
    return [
        dataclasses.replace(link, line=first_line + bisect.bisect_left(newlines, start))
        for start, link in found
    ]


def links_in(text: str, path: str, first_line: int = 1) -> tuple[Link, ...]:
    """The links written in a Markdown text that is part of a file of another kind (a canvas
    card, a drawing's text element), each with its line counted from `first_line`; what
    Obsidian hides (code spans, comments, math) is not read, as in a note."""
    masked = _INLINE_HIDDEN.sub(_blank, text)
    return tuple(_body_links(masked, path, first_line))


def _markdown_link(embed: bool, raw: str, own_name: str) -> Link | None:
    href = raw[1:-1] if raw.startswith("<") and raw.endswith(">") else raw
    if _URL_SCHEME.match(href):
        return None  # http:, mailto:, obsidian: ... are not notes in this vault
    target, _, anchor = unquote(href).partition("#")
    if target and not target.lower().endswith(".md"):
        return None
    target = target[:-3] if target.lower().endswith(".md") else target
    if target.startswith("./"):
        target = target[2:]
    anchor = anchor.strip()
    if not target:
        if not anchor:
            return None
        target = own_name
    heading = block = None
    if anchor.startswith("^"):
        block = anchor[1:] or None
    elif anchor:
        heading = anchor
    return Link(target=target, heading=heading, block=block, embed=embed)
