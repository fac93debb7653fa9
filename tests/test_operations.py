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
    refusal,
)
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
        both = refused(model, {**base, "since": "2021-01-01", "modified_since": "2021-01-01"})
        assert both == "give since or its old name modified_since, not both"
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
    reads = {n for n in BY_NAME if hasattr(service_module.Reads, n)}
    assert {"search", "note", "export"} <= reads
    assert reads <= set(dir(LocalService))
    assert set(BY_NAME) - {"openapi"} <= set(dir(DaemonService))


# -- one place for each name, cap and choice -----------------------------------------------------
#
# A field's name, a cap or a choice of the API is written where it is declared and where code
# acts on it, nowhere else in the API's surface (api/, cli/, the daemon's service): the server,
# the document, the client, the Service protocol, the MCP tools and the CLI's commands read them
# from the table. The library below (records, pipeline, index) names its own data, whose names
# the fields take (a chunk's `start_line`, a note's `tags`). The allowlist says which code acts
# on a request and why; what the tests find outside it is a copy.

ROOT = Path(__file__).resolve().parents[1] / "vaultd"
#: The API's surface: where the copies were.
SURFACE = ("api/", "cli/", "daemon/serving.py")

#: Declares the caps, the enumerations and the rules the models read.
DECLARING = ("api/operations.py", "api/limits.py", "query.py")
#: Acts on any field: the reads that answer a request (with or without a daemon) and the library
#: they call.
ACTING = ("api/local.py", "daemon/serving.py", "index/", "storage/")
#: Acts on some fields: the faces, each field it takes in a form of its own (the CLI's
#: `--where COND`, `--lines A-B`, a tool's fixed `text`) or shows of an answer (the parts of a
#: hit the MCP search passes on, a quarantined note's `since` in `vaultd status`); the route
#: table, which waits for `wait_for`, the answers without a daemon, which cannot, `--all`,
#: which gives each daemon the time its wait may take, and `[mcp] exclude`, which drops the
#: tags it names from the MCP tags tool's answer (its `tags`, each a `tag`).
FACES = {
    "cli/queries.py": None,
    "cli/mcp_bridge.py": {"text", "start_line", "end_line", "start_page", "end_page", "tags"}
    | {"explain", "blocks"},
    "cli/status.py": {"since"},
    "api/routes.py": {"wait_for", "timeout"},
    "cli/common.py": {"wait_for"},
    "cli/every_vault.py": {"wait_for"},
    "cli/mcp_exclude.py": {"tag", "tags"},
}
#: Field names that are also ordinary words of the code (a socket's `path`, a client's `timeout`,
#: a result's `text`): held by the typed tests above instead.
COMMON = {"path", "paths", "k", "text", "query", "prefix", "timeout", "mode", "how"}


def sources(under: tuple[str, ...] = ("",)) -> dict[str, str]:
    """The code of each module under these folders, imports left out (a module's name is no
    field's)."""
    found = {}
    for p in ROOT.rglob("*.py"):
        name = str(p.relative_to(ROOT))
        if name.startswith(under):
            lines = p.read_text(encoding="utf-8").splitlines()
            found[name] = "\n".join(
                x for x in lines if not x.lstrip().startswith(("from ", "import "))
            )
    return found


def may_write(file: str, name: str) -> bool:
    if file.startswith(DECLARING + ACTING):
        return True
    allowed = FACES.get(file, set())
    return allowed is None or name in allowed


def api_field_names() -> set[str]:
    names: set[str] = set()
    for op in OPERATIONS:
        names |= set(op.request.model_fields) | set(deprecated_aliases(op.request))
    return names


def test_a_field_name_is_written_only_by_the_model_and_the_code_acting_on_it() -> None:
    found = sources(SURFACE)
    copies = []
    for name in sorted(api_field_names() - COMMON):
        # Written as code: a string, an attribute or a keyword; prose in comments is free.
        written = re.compile(rf"[\"']{name}[\"']|\.{name}\b(?!\()|\b{name}=")
        copies += [(name, f) for f, text in found.items() if written.search(text)]
    assert [(name, f) for name, f in copies if not may_write(f, name)] == []


def test_exclude_linked_is_named_by_the_model_and_the_code_acting_on_it() -> None:
    holding = {f for f, text in sources().items() if "exclude_linked" in text}
    assert holding == {"api/operations.py", "api/local.py", "index/related.py"}


def enumerations() -> dict[str, tuple[Any, ...]]:
    """Each request field's choices, by field."""
    out = {}
    for op in OPERATIONS:
        for name, info in op.request.model_fields.items():
            if typing.get_origin(info.annotation) is typing.Literal:
                out[name] = typing.get_args(info.annotation)
    return out


def test_each_enumeration_is_declared_once_and_its_values_written_only_where_acted_on() -> None:
    found = sources()
    surface = sources(SURFACE)
    assert enumerations()
    for name, values in enumerations().items():
        literal = re.compile(r"Literal\[\s*" + r",\s*".join(f'"{v}"' for v in values))
        declared = [f for f, text in found.items() if literal.search(text)]
        assert declared == ["query.py"], (name, declared)
        listed = ", ".join(f'"{v}"' for v in values)
        assert [f for f, text in found.items() if listed in text] == ["query.py"], name
        for value in values:
            quoted = f'"{value}"'
            holding = [f for f, text in surface.items() if quoted in text]
            assert [f for f in holding if not may_write(f, name)] == [], (value, holding)


def test_each_cap_is_a_constant_assigned_once_and_never_a_number_again() -> None:
    found = sources()
    caps = {
        bound
        for op in OPERATIONS
        for info in op.request.model_fields.values()
        for m in info.metadata
        for bound in (getattr(m, "le", None), getattr(m, "max_length", None))
        if isinstance(bound, int) and bound > 1
    }
    assert {MAX_K, MAX_LIST, MAX_PER_NOTE, MAX_TAGS} <= caps
    constants = {"MAX_K", "MAX_LIST", "MAX_PER_NOTE", "MAX_TAGS", "MAX_WAIT", "MODES", "HOWS"}
    for cap in constants:
        assigned = [f for f, text in found.items() if re.search(rf"^{cap}\b.*=", text, re.M)]
        assert len(assigned) == 1, (cap, assigned)
    for cap in caps:
        # A bound written as a number: a pydantic or JSON Schema bound, or a click range.
        again = re.compile(
            rf"(\ble|max_length|maximum|maxItems)[\"']?\s*[=:]\s*{cap}\b|Range\([^)]*\b{cap}\)"
        )
        copies = [f for f, text in found.items() if again.search(text)]
        assert [f for f in copies if not f.startswith(DECLARING)] == [], cap
