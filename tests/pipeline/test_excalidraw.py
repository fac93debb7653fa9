"""pipeline/excalidraw: a drawing's text elements as a note's passages, never its drawing
data."""

from __future__ import annotations

import json

import pytest

from vaultd.errors import LeftOutError
from vaultd.pipeline import excalidraw
from vaultd.pipeline.parse import links_in
from vaultd.records import Link

PLUGIN_FILE = """---
excalidraw-plugin: parsed
tags: [excalidraw]
---
==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS menu of this document. ⚠==

# Excalidraw Data

## Text Elements
Queue of tasks ^abcd1234

Two lines
of text, see [[Worker]] ^efgh5678

%%
## Drawing
```compressed-json
N4KAkARALgngDgUwgLgAQQQDwMYEMA2AlgCYBOuA7hADTgQBuCpAzoQPYB2KqATLZMzYBXUtiRoIACyhQ4
```
%%
"""


def test_the_plugins_text_elements_are_passages_with_their_ids() -> None:
    note = excalidraw.extract(
        "Diagrams/Flow.excalidraw.md", PLUGIN_FILE.encode(), links_in=links_in
    )
    assert (note.title, note.kind) == ("Flow", "excalidraw")
    assert [(b.location.node, b.text) for b in note.blocks] == [
        ("abcd1234", "Queue of tasks"),
        ("efgh5678", "Two lines\nof text, see [[Worker]]"),
    ]
    assert "N4KAk" not in note.body
    assert note.links == (Link(target="Worker", line=4),)


def test_a_file_without_text_elements_has_no_passages() -> None:
    note = excalidraw.extract("a.excalidraw.md", b"---\nexcalidraw-plugin: parsed\n---\n")
    assert note.blocks == () and note.body == ""


def test_plain_json_text_elements_top_to_bottom_left_to_right() -> None:
    elements = [
        {"id": "b", "type": "text", "text": "right", "x": 50, "y": 0},
        {"id": "c", "type": "text", "text": "below", "x": 0, "y": 10},
        {"id": "a", "type": "text", "text": "left", "originalText": "left, whole", "x": 0, "y": 0},
        {"id": "d", "type": "text", "text": "gone", "x": 0, "y": 5, "isDeleted": True},
        {"id": "r", "type": "rectangle", "x": 0, "y": 0},
    ]
    note = excalidraw.extract("Plain.excalidraw", json.dumps({"elements": elements}).encode())
    assert note.title == "Plain"
    assert [(b.location.node, b.text) for b in note.blocks] == [
        ("a", "left, whole"),
        ("b", "right"),
        ("c", "below"),
    ]


@pytest.mark.parametrize(
    ("path", "data", "kind"),
    [
        ("x.excalidraw", b"{broken", "damaged"),
        ("x.excalidraw", b'{"elements": 3}', "damaged"),
        ("x.excalidraw.md", b"\xff\xfe\x00bad", "not_utf8"),
    ],
)
def test_what_is_no_drawing_is_left_out(path: str, data: bytes, kind: str) -> None:
    with pytest.raises(LeftOutError) as caught:
        excalidraw.extract(path, data)
    assert caught.value.kind == kind
