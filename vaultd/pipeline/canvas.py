"""A JSON Canvas 1.0 file (`*.canvas`, https://jsoncanvas.org) becomes a `Note`.

- Each text card is a passage of its own (`Block.node` is the card's id), under the labels of
  the groups that hold it as its heading path (outermost first); a card is in a group when its
  box lies inside the group's box, as the spec's groups hold their nodes.
- A link card is a passage too: its URL, which search finds by its words.
- A file card is a link from the canvas to the file it shows (its `subpath` the heading or
  block), and so is each end of an edge that is a file card: the notes a canvas shows list it
  as a backlink. Links written in a text card's Markdown are the canvas's links too.
- An edge's label is a passage naming the two cards it joins (`node` is the edge's id).
- Cards come in reading order: by group, then top to bottom, left to right.

A file that is not JSON, or whose `nodes` is no list, is left out as damaged (`LeftOutError`);
a node without an id or of an unknown type is skipped and named in `Note.errors`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Any

from vaultd.errors import LeftOutError
from vaultd.records import Block, Link, Note, lay_out

#: How links in a card's Markdown are found (`parse.links_in`, passed in by the indexer:
#: stages never import each other).
LinksIn = Callable[[str, str, int], tuple[Link, ...]]


def _no_links(text: str, path: str, first_line: int) -> tuple[Link, ...]:
    return ()


def extract(path: str, data: bytes, *, links_in: LinksIn = _no_links) -> Note:
    """The canvas at vault path `path` with these bytes, as a note of kind "canvas"."""
    path = unicodedata.normalize("NFC", path)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise LeftOutError(path, f"not a JSON Canvas file ({_why(exc)})", "damaged") from exc
    if not isinstance(document, dict) or not isinstance(document.get("nodes", []), list):
        raise LeftOutError(path, "not a JSON Canvas file (no list of nodes)", "damaged")
    errors: list[str] = []
    nodes = [n for n in document.get("nodes", []) if _valid(n, errors)]
    edges = [e for e in document.get("edges", []) or [] if isinstance(e, dict)]
    by_id = {str(n["id"]): n for n in nodes}
    groups = [n for n in nodes if n["type"] == "group"]

    blocks: list[Block] = []
    file_links: list[Link] = []
    for node in sorted(nodes, key=lambda n: (_group_path(n, groups), _y(n), _x(n))):
        kind, node_id = node["type"], str(node["id"])
        headings = _group_path(node, groups)
        if kind == "text" and isinstance(node.get("text"), str):
            blocks.append(_block(node["text"], node_id, headings))
        elif kind == "link" and isinstance(node.get("url"), str):
            blocks.append(_block(node["url"], node_id, headings))
        elif kind == "file" and isinstance(node.get("file"), str):
            file_links.append(_file_link(node))
    for edge in edges:
        ends = [by_id.get(str(edge.get(side))) for side in ("fromNode", "toNode")]
        file_links.extend(_file_link(n) for n in ends if n is not None and n["type"] == "file")
        label = edge.get("label")
        if isinstance(label, str) and label.strip() and all(n is not None for n in ends):
            names = " → ".join(_name(n) for n in ends if n is not None)
            blocks.append(_block(f"{names}: {label}", str(edge.get("id", "")) or None, ()))

    body, laid = lay_out(blocks)
    links: list[Link] = []
    for block in laid:
        links.extend(links_in(block.text, path, block.start_line))
    # One link per target, place and form: a file card and an edge can name the same file.
    unique = list(dict.fromkeys((*file_links, *links)))
    return Note(
        path=path,
        title=PurePosixPath(path).stem,
        links=tuple(unique),
        body=body,
        blocks=laid,
        errors=tuple(errors),
        kind="canvas",
    )


def _why(exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return "nested too deeply"


def _valid(node: Any, errors: list[str]) -> bool:
    if not isinstance(node, dict) or "id" not in node:
        errors.append("a node without an id was skipped")
        return False
    if node.get("type") not in ("text", "file", "link", "group"):
        errors.append(f"node {node['id']}: unknown type {node.get('type')!r}, skipped")
        return False
    return True


def _number(node: Mapping[str, Any], key: str) -> float:
    value = node.get(key, 0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _x(node: Mapping[str, Any]) -> float:
    return _number(node, "x")


def _y(node: Mapping[str, Any]) -> float:
    return _number(node, "y")


def _inside(node: Mapping[str, Any], group: Mapping[str, Any]) -> bool:
    if node is group:
        return False
    x, y = _x(node), _y(node)
    gx, gy = _x(group), _y(group)
    return (
        gx <= x
        and gy <= y
        and x + _number(node, "width") <= gx + _number(group, "width")
        and y + _number(node, "height") <= gy + _number(group, "height")
    )


def _group_path(node: Mapping[str, Any], groups: list[dict[str, Any]]) -> tuple[str, ...]:
    """The labels of the groups holding `node`, the biggest (outermost) first."""
    holding = [g for g in groups if _inside(node, g)]
    holding.sort(key=lambda g: -_number(g, "width") * _number(g, "height"))
    return tuple(str(g["label"]) for g in holding if isinstance(g.get("label"), str) and g["label"])


def _block(text: str, node: str | None, headings: tuple[str, ...]) -> Block:
    return Block(
        kind="paragraph", start_line=0, end_line=0, text=text, node=node, headings=headings
    )


def _file_link(node: Mapping[str, Any]) -> Link:
    """A file card's link: its file, and its subpath (`#Heading` or `#^block`)."""
    subpath = str(node.get("subpath") or "").lstrip("#")
    heading = block = None
    if subpath.startswith("^"):
        block = subpath[1:] or None
    elif subpath:
        heading = subpath
    return Link(target=str(node["file"]), heading=heading, block=block, embed=True)


def _name(node: Mapping[str, Any]) -> str:
    """How an edge's label names a card: its file, its URL, or its text's first line."""
    for key in ("file", "url", "label", "text"):
        value = node.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip().split("\n", 1)[0][:80]
    return str(node["id"])
