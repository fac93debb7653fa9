"""An Excalidraw drawing becomes a `Note`: its text, never its drawing data.

- `*.excalidraw.md` (the Obsidian Excalidraw plugin's file): only the `Text Elements` section
  (`# Text Elements` in older files, `## Text Elements` under `# Excalidraw Data` in newer
  ones), up to the next heading or `%%`. Each element there ends with ` ^id`; it is a passage
  of its own with that id as its `node`. The compressed drawing (`## Drawing`), the element
  links and the embedded files are never read.
- `*.excalidraw` (plain Excalidraw JSON): each text element not deleted is a passage (`node`
  the element's id), top to bottom, left to right.

Links written in the text ([[like this]]) are the drawing's links. A drawing with no text is a
note with no passages, as an empty note is; a `.excalidraw` file that is not JSON is left out
as damaged (`LeftOutError`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from vaultd.errors import LeftOutError
from vaultd.records import Block, Link, Location, Note, lay_out

#: How links in the text are found (`parse.links_in`, passed in by the indexer).
LinksIn = Callable[[str, str, int], tuple[Link, ...]]

_TEXT_ELEMENTS = re.compile(r"^#{1,6}[ \t]+Text Elements[ \t]*$", re.MULTILINE)
_SECTION_END = re.compile(r"^(?:#{1,6}[ \t]|%%)", re.MULTILINE)
_ELEMENT_END = re.compile(r"^(.*?)[ \t]*\^([A-Za-z0-9_-]{4,})[ \t]*$")


def _no_links(text: str, path: str, first_line: int) -> tuple[Link, ...]:
    return ()


def title_of(path: str) -> str:
    """The drawing's name: its file name without `.excalidraw.md` or `.excalidraw`."""
    name = PurePosixPath(path).name
    for suffix in (".excalidraw.md", ".excalidraw"):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return PurePosixPath(path).stem


def extract(path: str, data: bytes, *, links_in: LinksIn = _no_links) -> Note:
    """The drawing at vault path `path` with these bytes, as a note of kind "excalidraw"."""
    path = unicodedata.normalize("NFC", path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LeftOutError(path, "not UTF-8 text", "not_utf8") from exc
    text = text.replace("\r\n", "\n")
    if path.lower().endswith(".md"):
        blocks = _markdown_elements(text)
    else:
        blocks = _json_elements(path, text)
    body, laid = lay_out(blocks)
    links = tuple(link for b in laid for link in links_in(b.text, path, b.start_line))
    return Note(
        path=path, title=title_of(path), links=links, body=body, blocks=laid, kind="excalidraw"
    )


def _markdown_elements(text: str) -> list[Block]:
    start = _TEXT_ELEMENTS.search(text)
    if start is None:
        return []
    rest = text[start.end() :]
    end = _SECTION_END.search(rest)
    section = rest[: end.start()] if end else rest
    blocks: list[Block] = []
    pending: list[str] = []
    for line in section.split("\n"):
        match = _ELEMENT_END.match(line)
        if match:
            pending.append(match.group(1))
            blocks.append(_block("\n".join(pending), match.group(2)))
            pending = []
        else:
            pending.append(line)
    if "\n".join(pending).strip():
        blocks.append(_block("\n".join(pending), None))
    return blocks


def _json_elements(path: str, text: str) -> list[Block]:
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise LeftOutError(path, "not an Excalidraw file (invalid JSON)", "damaged") from exc
    elements = document.get("elements") if isinstance(document, dict) else None
    if not isinstance(elements, list):
        raise LeftOutError(path, "not an Excalidraw file (no list of elements)", "damaged")
    texts = [e for e in elements if _is_text(e)]
    texts.sort(key=lambda e: (_number(e, "y"), _number(e, "x")))
    return [
        _block(e.get("originalText") or e["text"], str(e.get("id") or "") or None) for e in texts
    ]


def _is_text(element: Any) -> bool:
    return (
        isinstance(element, dict)
        and element.get("type") == "text"
        and not element.get("isDeleted")
        and isinstance(element.get("text"), str)
    )


def _number(element: dict[str, Any], key: str) -> float:
    value = element.get(key, 0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _block(text: str, node: str | None) -> Block:
    return Block(
        kind="paragraph",
        start_line=0,
        end_line=0,
        text=text,
        location=Location(node=node),
        headings=(),
    )
