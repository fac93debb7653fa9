"""The reads over an open index (vaultd.api.local): every read operation answered with its
response model, the same answer the socket's routes give, over one small real index."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.small_vault import indexed
from vaultd.api.local import LocalService
from vaultd.api.operations import OPERATIONS, Operation
from vaultd.api.server import Api, Lines
from vaultd.api.service import Reads
from vaultd.daemon.serving import DaemonService
from vaultd.daemon.state import State
from vaultd.errors import NoteNotIndexedError
from vaultd.index.open import Index

NOTES = {
    "Plugins/Canvas.md": "---\ntags: [tool]\n---\n# Canvas\n\nAn infinite board for cards.\n\n"
    "## Cards\n\nCards hold notes and images.\n",
    "Home.md": "# Home\n\nStart with [[Canvas]] for boards.\n\n## Later\n\nThe canvas again.\n",
    "Garden/Compost.md": "# Compost\n\nTurn the compost pile weekly; it feeds the beds.\n",
}
#: Each read with a request that finds something in NOTES.
ASKED: dict[str, dict[str, Any]] = {
    "search": {"query": "infinite board", "k": 3, "since": "2021-01-01"},
    "note": {"path": "Canvas", "text": True, "start_line": 4},
    "related": {"path": "Home.md", "k": 2},
    "mentions": {"path": "Plugins/Canvas.md"},
    "backlinks": {"path": "Canvas"},
    "outline": {"path": "Home.md"},
    "tags": {},
    "recent": {"k": 2},
    "export": {},
}
READS = [op for op in OPERATIONS if hasattr(Reads, op.name)]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    with indexed(tmp_path_factory.mktemp("local"), NOTES) as opened:
        yield opened


def over_the_route(index: Index, op: Operation, asked: dict[str, Any]) -> Any:
    """What the socket's route answers, in process, with the same request."""
    api = Api(DaemonService(index, State(), lambda: None, dict))
    fields = dict(asked)
    target = op.route.replace("{path}", str(fields.pop("path", "")))
    if op.method == "POST":
        status, body = api.handle("POST", target, json.dumps(fields).encode())
    else:
        query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in fields.items()}
        status, body = api.handle("GET", f"{target}?{urlencode(query)}", b"")
    assert status == HTTPStatus(op.status)
    return list(body.items) if isinstance(body, Lines) else body


@pytest.mark.parametrize("op", READS, ids=lambda op: op.name)
def test_each_read_answers_its_model_as_the_route_does(index: Index, op: Operation) -> None:
    local = LocalService(index)
    answer = getattr(local, op.name)(op.request.model_validate(ASKED[op.name]))
    if op.stream:
        records = [r.model_dump(mode="json", exclude_unset=True) for r in answer]
        assert records and all(isinstance(r, dict) for r in records)
        assert records == over_the_route(index, op, ASKED[op.name])
        return
    assert isinstance(answer, op.response)
    dumped = answer.model_dump(mode="json", exclude_unset=True)
    assert dumped == over_the_route(index, op, ASKED[op.name])
    assert any(v for v in dumped.values() if isinstance(v, list | str))


def test_the_backlinks_and_the_note_name_resolve_as_obsidian_does(index: Index) -> None:
    local = LocalService(index)
    op = {o.name: o for o in READS}
    found = local.backlinks(op["backlinks"].request.model_validate({"path": "Canvas"}))
    assert found.path == "Plugins/Canvas.md"
    assert [(b.path, b.links) for b in found.backlinks] == [("Home.md", 1)]
    assert found.backlinks[0].passages[0].link_lines == [3]
    note = local.note(op["note"].request.model_validate({"path": "Canvas", "text": True}))
    assert note.text is not None and note.text.startswith("---") and note.total_lines == 10
    with pytest.raises(NoteNotIndexedError, match="no indexed note 'Nowhere'"):
        local.outline(op["outline"].request.model_validate({"path": "Nowhere"}))


def test_the_old_spellings_reach_the_same_filters(index: Index) -> None:
    api = Api(DaemonService(index, State(), lambda: None, dict))
    new = api.handle("GET", "/v1/notes/Home.md/related?tags=tool&since=2021-01-01", b"")
    old = api.handle("GET", "/v1/notes/Home.md/related?tag=tool&modified_since=2021-01-01", b"")
    assert new == old and [r["path"] for r in new[1]["related"]] == ["Plugins/Canvas.md"]


def test_a_typo_is_corrected_and_said_so_by_the_service_and_its_route(index: Index) -> None:
    from vaultd.api.operations import BY_NAME, SearchRequest

    asked = {"query": "compost piel weekly", "k": 3}
    answer = LocalService(index).search(SearchRequest.model_validate(asked))
    assert answer.hits[0].path == "Garden/Compost.md"
    assert [(c.word, c.edits) for c in answer.corrections] == [("piel", 1)]
    served = over_the_route(index, BY_NAME["search"], asked)
    assert answer.model_dump(mode="json", exclude_unset=True) == served
