"""A JSON Canvas 1.0 file (`*.canvas`, https://jsoncanvas.org) becomes a `Note`.

- Each text card is a passage of its own (its location the card's id), under the labels of
  the groups that hold it as its heading path (outermost first); a card is in a group when its
  box lies inside the group's box, as the spec's groups hold their nodes.
- A link card is a passage too: its URL, which search finds by its words.
- A file card is a link from the canvas to the file it shows (its `subpath` the heading or
  block), and so is each end of an edge that is a file card: the notes a canvas shows list it
  as a backlink. Links written in a text card's Markdown are the canvas's links too.
- An edge's label is a passage naming the two cards it joins (`node` is the edge's id).
- Cards come in reading order: by group, then top to bottom, left to right.
- A card's heading path keeps the innermost `MAX_GROUP_DEPTH` labels of the groups holding it
  (as deep as Markdown's headings go): a canvas of thousands of nested groups would otherwise
  give each card a path as long as the canvas.
- Only the first `max_cards` nodes and the first `max_cards` edges are read; the rest are
  named in `Note.errors`, so the canvas is indexed in part and `status` says so.

Finding the groups that hold each card is the only step that is not linear: it compares every
card with every labelled group, in numpy (one vector operation per card), so its cost is
bounded by `max_cards` squared and is a fraction of a second at the default (the pure-Python
comparison took 88 s for 2,000 nested groups).

A file that is not JSON, or whose `nodes` is no list, is left out as damaged (`LeftOutError`);
a node without an id or of an unknown type is skipped and named in `Note.errors`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from vaultd.errors import LeftOutError
from vaultd.records import Block, Link, Location, Note, lay_out

#: How links in a card's Markdown are found (`parse.links_in`, passed in by the indexer:
#: stages never import each other).
LinksIn = Callable[[str, str, int], tuple[Link, ...]]

#: Nodes (cards and groups), and edges, read of one canvas by default (`[attachments]
#: max_cards`); the rest are named in the note's errors.
DEFAULT_MAX_CARDS = 5_000
#: Group labels kept in a card's heading path: the innermost ones.
MAX_GROUP_DEPTH = 6


def _no_links(text: str, path: str, first_line: int) -> tuple[Link, ...]:
    return ()


def extract(
    path: str,
    data: bytes,
    *,
    links_in: LinksIn = _no_links,
    max_cards: int = DEFAULT_MAX_CARDS,
) -> Note:
    """The canvas at vault path `path` with these bytes, as a note of kind "canvas": its first
    `max_cards` nodes and edges."""
    path = unicodedata.normalize("NFC", path)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise LeftOutError(path, f"not a JSON Canvas file ({_why(exc)})", "damaged") from exc
    if not isinstance(document, dict) or not isinstance(document.get("nodes", []), list):
        raise LeftOutError(path, "not a JSON Canvas file (no list of nodes)", "damaged")
    errors: list[str] = []
    listed = _capped(document.get("nodes", []), max_cards, "cards", errors)
    nodes = [n for n in listed if _valid(n, errors)]
    edges_listed = document.get("edges", []) or []
    if not isinstance(edges_listed, list):
        edges_listed = []
    edges_listed = _capped(edges_listed, max_cards, "edges", errors)
    edges = [e for e in edges_listed if isinstance(e, dict)]
    by_id = {str(n["id"]): n for n in nodes}
    paths = _group_paths(nodes)

    blocks: list[Block] = []
    file_links: list[Link] = []
    order = sorted(range(len(nodes)), key=lambda i: (paths[i], _y(nodes[i]), _x(nodes[i])))
    for index in order:
        node, headings = nodes[index], paths[index]
        kind, node_id = node["type"], str(node["id"])
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


def _capped(items: list[Any], most: int, what: str, errors: list[str]) -> list[Any]:
    """The first `most` items; past that, the rest is named in `errors` (indexed in part)."""
    if len(items) <= most:
        return items
    errors.append(f"only the first {most} of its {len(items)} {what} are indexed (max_cards)")
    return items[:most]


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


def _box(node: Mapping[str, Any]) -> tuple[float, float, float, float]:
    x, y = _x(node), _y(node)
    return x, y, x + _number(node, "width"), y + _number(node, "height")


def _group_paths(nodes: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    """Each node's heading path: the labels of the groups whose box holds its box (a group
    never holds itself), the biggest (outermost) first, the innermost MAX_GROUP_DEPTH of them.

    Groups without a label add nothing to a path and are not compared. The labelled groups
    are sorted by area, biggest first (a stable sort: equal areas keep the file's order), and
    each node is compared with all of them at once."""
    labelled = [
        (i, n)
        for i, n in enumerate(nodes)
        if n["type"] == "group" and isinstance(n.get("label"), str) and n["label"]
    ]
    if not labelled:
        return [()] * len(nodes)
    boxes = np.array([_box(g) for _, g in labelled], dtype=np.float64).reshape(-1, 4)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    order = np.argsort(-area, kind="stable")
    left, top, right, bottom = (np.ascontiguousarray(boxes[order, k]) for k in range(4))
    labels = [str(labelled[k][1]["label"]) for k in order]
    #: Where each labelled group sits in that order, by its node's index (to leave it out of
    #: its own path).
    rank = {labelled[k][0]: r for r, k in enumerate(order.tolist())}
    paths: list[tuple[str, ...]] = []
    for index, node in enumerate(nodes):
        x1, y1, x2, y2 = _box(node)
        holds = (left <= x1) & (top <= y1) & (right >= x2) & (bottom >= y2)
        own = rank.get(index)
        if own is not None:
            holds[own] = False
        innermost = np.flatnonzero(holds)[-MAX_GROUP_DEPTH:]
        paths.append(tuple(labels[k] for k in innermost.tolist()))
    return paths


def _block(text: str, node: str | None, headings: tuple[str, ...]) -> Block:
    return Block(
        kind="paragraph",
        start_line=0,
        end_line=0,
        text=text,
        location=Location(node=node),
        headings=headings,
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
