"""The operation table: each request model refuses what it does not declare and holds its caps,
old spellings are taken once, and the Service protocol, the local service and the daemon's are
typed by the same models. No daemon, no index: the models alone."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from vaultd.api import service as service_module
from vaultd.api.limits import MAX_TAGS
from vaultd.api.local import LocalService
from vaultd.api.operations import (
    BY_NAME,
    OPERATIONS,
    MentionsRequest,
    Operation,
    RecentRequest,
    RelatedRequest,
    SearchRequest,
    deprecated_aliases,
)
from vaultd.api.server import refusal
from vaultd.daemon.serving import DaemonService
from vaultd.query import MAX_K, MAX_LIST, MAX_PER_NOTE

#: The least each request needs to be valid.
MINIMAL: dict[str, dict[str, Any]] = {
    "search": {"query": "garden"},
    **{
        name: {"path": "Garden/Compost.md"}
        for name in BY_NAME
        if name in ("note", "related", "mentions", "backlinks", "outline")
    },
}


def minimal(op: Operation) -> dict[str, Any]:
    return dict(MINIMAL.get(op.name, {}))


def refused(model: type[BaseModel], data: dict[str, Any], strict: bool = True) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data, strict=strict)
    return refusal(model, caught.value)


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_every_request_refuses_an_unknown_field_by_name(op: Operation) -> None:
    op.request.model_validate(minimal(op), strict=True)
    message = refused(op.request, {**minimal(op), "limit": 2})
    assert "unknown field 'limit'" in message


def test_the_issues_example_is_refused_and_a_typo_gets_a_hint() -> None:
    assert refused(SearchRequest, {"query": "canvas", "limit": 2}) == "unknown field 'limit'"
    hinted = refused(SearchRequest, {"qurey": "canvas"})
    assert "unknown field 'qurey' (did you mean 'query'?)" in hinted
    assert "query is required" in hinted


@pytest.mark.parametrize(
    ("model", "base", "field", "low", "high"),
    [
        (SearchRequest, {"query": "x"}, "k", 1, MAX_K),
        (SearchRequest, {"query": "x"}, "per_note", 0, MAX_PER_NOTE),
        (RelatedRequest, {"path": "a.md"}, "k", 1, MAX_K),
        (MentionsRequest, {"path": "a.md"}, "k", 1, MAX_LIST),
        (RecentRequest, {}, "k", 1, MAX_LIST),
    ],
)
def test_caps_are_held_at_both_ends(
    model: type[BaseModel], base: dict[str, Any], field: str, low: int, high: int
) -> None:
    for good in (low, high):
        model.model_validate({**base, field: good}, strict=True)
    for bad in (low - 1, high + 1):
        assert refused(model, {**base, field: bad}) == f"{field} must be {low} to {high}"


def test_tags_are_capped_and_strictly_typed() -> None:
    SearchRequest.model_validate({"query": "x", "tags": ["t"] * MAX_TAGS}, strict=True)
    assert "tags" in refused(SearchRequest, {"query": "x", "tags": ["t"] * (MAX_TAGS + 1)})
    assert "tags" in refused(SearchRequest, {"query": "x", "tags": "garden"})
    assert "k" in refused(SearchRequest, {"query": "x", "k": "3"})


def test_since_is_the_name_everywhere_and_modified_since_is_taken_for_one_release() -> None:
    for model, base in ((SearchRequest, {"query": "x"}), (RelatedRequest, {"path": "a.md"})):
        new = model.model_validate({**base, "since": "2021-01-01"})
        old = model.model_validate({**base, "modified_since": "2021-01-01"})
        assert new == old
        assert deprecated_aliases(model)["modified_since"] == "since"
        refused(model, {**base, "since": "2021-01-01", "modified_since": "2021-01-01"})
    assert RecentRequest.model_validate({"modified_since": 5}).since == 5
    assert "since" in refused(SearchRequest, {"query": "x", "since": "yesterday"})


def test_kinds_are_the_records_kinds_and_reach_the_filters() -> None:
    from vaultd.records import NOTE_KINDS

    schema = SearchRequest.model_json_schema()["properties"]["kinds"]
    assert schema["items"]["enum"] == list(NOTE_KINDS)
    for model, base in ((SearchRequest, {"query": "x"}), (RelatedRequest, {"path": "a.md"})):
        asked = model.model_validate({**base, "kinds": ["pdf", "canvas", "pdf"]})
        assert asked.filters.kinds == ("pdf", "canvas") and asked.filters.active
        assert not model.model_validate(base).filters.kinds
        assert "kinds" in refused(model, {**base, "kinds": ["spreadsheet"]})
        assert "kinds" in refused(model, {**base, "kinds": "pdf"})


def test_a_query_and_paths_are_refused_with_the_rules_own_words() -> None:
    from vaultd.errors import QueryError
    from vaultd.query import check_query

    with pytest.raises(QueryError) as rule:
        check_query("  ")
    assert refused(SearchRequest, {"query": "  "}) == str(rule.value)
    assert refused(SearchRequest, {"query": "x", "path_prefix": "../up"}).startswith("path_prefix:")
    assert refused(SearchRequest, {"query": "x", "wait_for": "/etc"}).startswith("wait_for:")


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
def test_one_docstring_dedented_serves_every_face(op: Operation) -> None:
    assert op.summary and op.summary.endswith(".")
    assert not [line for line in op.doc.splitlines() if line.startswith(" ")]


def test_the_service_protocol_is_typed_by_the_models() -> None:
    hints_of = {
        name: typing.get_type_hints(getattr(service_module.Service, name), vars(service_module))
        for name in BY_NAME
        if name != "openapi"
    }
    for name, hints in hints_of.items():
        op = BY_NAME[name]
        assert hints["request"] is op.request, name
        answer = hints["return"]
        assert answer is op.response or typing.get_args(answer) == (op.response,), name


def test_the_local_and_the_daemons_service_answer_every_operation() -> None:
    reads = {n for n in BY_NAME if n != "openapi" and not BY_NAME[n].daemon_only}
    assert reads <= set(dir(LocalService))
    assert set(BY_NAME) - {"openapi"} <= set(dir(DaemonService))


# -- one place for each name ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1] / "vaultd"
#: The server side: it declares nothing by hand, it reads the table.
SERVER_SIDE = ["api/server.py", "api/openapi.py", "api/service.py", "api/local.py"]
SERVER_SIDE += ["api/limits.py", "daemon/serving.py", "query.py"]
#: Field names too common to tell a declaration from other uses (a route's `path`, JSON's
#: `text`, OpenAPI's `paths` and `query`): held by the typed tests above instead.
COMMON = {"path", "paths", "k", "text", "query", "tags", "prefix", "how", "mode", "merge"}
COMMON |= {"explain", "timeout", "vectors", "start_line", "end_line"}


#: The clients (the CLI and the MCP bridge) are held by their own tests.
CLIENTS = {"cli/commands.py", "cli/mcp_bridge.py", "api/client.py"}


def api_field_names() -> set[str]:
    names: set[str] = set()
    for op in OPERATIONS:
        names |= set(op.request.model_fields) | set(deprecated_aliases(op.request))
    return names - COMMON


def test_no_server_side_module_but_the_table_writes_a_field_name_as_a_string() -> None:
    for name in sorted(api_field_names()):
        quoted = re.compile(rf"[\"']{re.escape(name)}[\"']")
        written = [f for f in SERVER_SIDE if quoted.search((ROOT / f).read_text(encoding="utf-8"))]
        assert not written, f"{name!r} is written by hand in {written}"


def test_exclude_linked_is_named_by_the_model_and_the_code_acting_on_it() -> None:
    holding = {
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*.py")
        if "exclude_linked" in p.read_text(encoding="utf-8")
    }
    assert holding - CLIENTS == {"api/operations.py", "api/local.py", "index/related.py"}


def test_each_cap_and_choice_is_assigned_once() -> None:
    sources = {
        p: p.read_text(encoding="utf-8")
        for p in ROOT.rglob("*.py")
        if str(p.relative_to(ROOT)) not in CLIENTS
    }
    for cap in ("MAX_K", "MAX_LIST", "MAX_PER_NOTE", "MAX_TAGS", "MAX_WAIT", "MODES", "HOWS"):
        assigned = [p for p, text in sources.items() if re.search(rf"^{cap}\b.*=", text, re.M)]
        assert len(assigned) == 1, (cap, assigned)
    for choice in ('"hybrid", "vector", "keyword"', '"fused", "coverage", "passages"'):
        listed = [p for p, text in sources.items() if choice in text]
        assert [p.name for p in listed] == ["query.py"], (choice, listed)
