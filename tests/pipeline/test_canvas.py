"""pipeline/canvas: a JSON Canvas file as a note, a passage per card in reading order under its
groups' labels, file cards and edges as links, edge labels as passages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vaultd.errors import LeftOutError
from vaultd.pipeline import canvas
from vaultd.pipeline.parse import links_in
from vaultd.records import Link


def board(nodes: list[Any], edges: list[Any] = ()) -> bytes:  # type: ignore[assignment]
    return json.dumps({"nodes": nodes, "edges": list(edges)}).encode()


def card(id_: str, x: int, y: int, **rest: Any) -> dict[str, Any]:
    return {"id": id_, "x": x, "y": y, "width": 100, "height": 50, **rest}


GROUP = {"id": "g", "type": "group", "label": "Plans", "x": 0, "y": 0, "width": 500, "height": 500}


def test_cards_are_passages_in_reading_order_under_their_groups() -> None:
    note = canvas.extract(
        "boards/Plan.canvas",
        board(
            [
                card("out", 0, 900, type="text", text="Outside the group"),
                card("low", 10, 300, type="text", text="Lower card"),
                GROUP,
                card("url", 200, 10, type="link", url="https://example.org/page"),
                card("top", 10, 10, type="text", text="Top card\nsecond line"),
            ]
        ),
    )
    assert (note.title, note.kind) == ("Plan", "canvas")
    assert [(b.location.node, b.headings, b.text) for b in note.blocks] == [
        ("out", (), "Outside the group"),
        ("top", ("Plans",), "Top card\nsecond line"),
        ("url", ("Plans",), "https://example.org/page"),
        ("low", ("Plans",), "Lower card"),
    ]
    assert [(b.start_line, b.end_line) for b in note.blocks] == [(1, 1), (3, 4), (6, 6), (8, 8)]


def test_file_cards_edges_and_card_markdown_are_links_once_each() -> None:
    nodes = [
        card("f", 0, 0, type="file", file="Notes/Target.md", subpath="#^block1"),
        card("h", 0, 100, type="file", file="Other.md", subpath="#Intro"),
        card("t", 0, 200, type="text", text="See [[Linked note]]"),
    ]
    edges = [{"id": "e", "fromNode": "f", "toNode": "t", "label": "explains"}]
    note = canvas.extract("b.canvas", board(nodes, edges), links_in=links_in)
    assert note.links == (
        Link(target="Notes/Target.md", block="block1", embed=True),
        Link(target="Other.md", heading="Intro", embed=True),
        Link(target="Linked note"),
    )
    assert note.blocks[-1].location.node == "e"
    assert note.blocks[-1].text == "Notes/Target.md → See [[Linked note]]: explains"


def test_bad_nodes_are_skipped_and_named_in_errors() -> None:
    note = canvas.extract(
        "b.canvas",
        board([{"type": "text", "text": "no id"}, card("s", 0, 0, type="shape"), GROUP]),
    )
    assert note.blocks == ()
    assert note.errors == (
        "a node without an id was skipped",
        "node s: unknown type 'shape', skipped",
    )


@pytest.mark.parametrize("data", [b"{not json", b"\xff\xfe", b'{"nodes": {}}', b"[1, 2]"])
def test_a_file_that_is_no_canvas_is_left_out_as_damaged(data: bytes) -> None:
    with pytest.raises(LeftOutError) as caught:
        canvas.extract("b.canvas", data)
    assert caught.value.kind == "damaged"
