"""The served /openapi.json against the server that serves it, over the real socket.

Every route the server answers is in the document and every route of the document is answered,
with the methods the document gives and no other (405 with the document's Allow), and each
answer is the document's. Then a schema-driven fuzz: requests are drawn from the document's own
request schemas and mutated (a value of the wrong type or out of range, an unknown field, a
required one dropped); each is judged by the document (jsonschema) and sent to the daemon, and
the two must agree: the server accepts what the document allows and refuses (400) what it
forbids. Values the document can describe only in words (a vault path, an ISO date, the query's
count of search terms, line ranges inside the note) are drawn from valid ones, and mutated only
in ways the schema itself rules out.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.daemon import RunningDaemon, short_socket_dir
from harness.vaults import NOTES, write_vault
from tests.test_server import Reply, _UnixHTTP, call, start_daemon
from vaultd.api.operations import OPERATIONS
from vaultd.api.server import Api

NOTE = "Garden/Compost.md"
#: The least each operation needs; the rest of its request takes its defaults.
EXAMPLES: dict[str, dict[str, Any]] = {"search": {"query": "garden"}}


@dataclass
class Served:
    daemon: RunningDaemon
    doc: dict[str, Any]

    @property
    def sock(self) -> Path:
        return self.daemon.socket

    def operation(self, method: str, route: str) -> dict[str, Any]:
        found: dict[str, Any] = self.doc["paths"][route][method.lower()]
        return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    work = tmp_path_factory.mktemp("openapi")
    runtime = short_socket_dir()
    daemon = start_daemon(write_vault(work / "vault"), work, runtime)
    try:
        daemon.wait_idle()
        yield Served(daemon, call(daemon.socket, "GET", "/openapi.json").body)
    finally:
        daemon.stop()
        shutil.rmtree(runtime, ignore_errors=True)


def target_of(route: str, query: str = "") -> str:
    target = route.replace("{path}", quote(NOTE))
    return f"{target}?{query}" if query else target


def streamed(sock: Path, target: str) -> tuple[int, str, list[Any]]:
    """A JSON-lines answer: its status, content type and records."""
    connection = _UnixHTTP(sock, 60)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        data = response.read()
        kind = response.getheader("Content-Type") or ""
    finally:
        connection.close()
    return response.status, kind, [json.loads(line) for line in data.splitlines() if line]


def validate(instance: Any, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(schema).validate(instance)


def answer_schema(served: Served, method: str, route: str, status: int) -> tuple[str, Any]:
    responses = served.operation(method, route)["responses"]
    assert str(status) in responses, f"{method} {route}: undocumented {status}"
    ((kind, content),) = responses[str(status)]["content"].items()
    return kind, content["schema"]


# -- every route both ways -------------------------------------------------------------------------


def test_the_document_is_a_valid_openapi_3_1_document(served: Served) -> None:
    from openapi_spec_validator import validate as validate_spec

    assert served.doc["openapi"] == "3.1.0"
    validate_spec(served.doc)


def test_the_routes_answered_are_the_routes_documented_both_ways(served: Served) -> None:
    documented = {(m.upper(), route) for route, ops in served.doc["paths"].items() for m in ops}
    dispatched = {(op.method, op.route) for op, _ in Api(None).routes}  # type: ignore[arg-type]
    assert documented == dispatched == {(op.method, op.route) for op in OPERATIONS}
    for method, route in sorted(documented):
        op = served.operation(method, route)
        success = next(int(s) for s in op["responses"] if s.startswith("2"))
        body = EXAMPLES.get(op["operationId"], {})
        if op["operationId"] == "events":
            continue  # a stream without end (pings keep it open): tests/test_events.py reads it
        if op["operationId"] == "export":
            status, kind, records = streamed(served.sock, target_of(route))
            assert status == success
            documented_kind, schema = answer_schema(served, method, route, status)
            assert kind == documented_kind and records
            for record in records:
                validate(record, schema)
            continue
        payload = json.dumps(body).encode() if method == "POST" else None
        reply = call(served.sock, method, target_of(route), payload)
        assert reply.status == success, (route, reply.body)
        kind, schema = answer_schema(served, method, route, reply.status)
        assert reply.headers["content-type"] == kind
        validate(reply.body, schema)
    served.daemon.wait_idle()  # the reindex asked for above


def test_a_method_the_document_does_not_give_is_405_and_an_undocumented_route_404(
    served: Served,
) -> None:
    for route, ops in served.doc["paths"].items():
        given = {m.upper() for m in ops}
        for method in {"GET", "POST", "PUT", "DELETE", "PATCH"} - given:
            reply = call(served.sock, method, target_of(route), b"{}")
            assert reply.status == 405, (method, route)
            assert set(reply.headers["allow"].split(", ")) == given
    for path in (
        "/v1/nope",
        "/v1/notes",
        "/v1/notes/",
        "/v1/search/x",
        "/openapi.yaml",
        "/v2/health",
    ):
        assert call(served.sock, "GET", path).status == 404, path


def test_a_phrase_with_a_filter_is_searched(served: Served) -> None:
    # Found by the fuzz below: the phrase requirement's SQL named an ambiguous rowid once the
    # notes were filtered (503 "no such column: rowid").
    for body in ({"path_prefix": "Garden"}, {"since": "2021-01-01"}, {"tags": ["garden"]}):
        reply = call(
            served.sock,
            "POST",
            "/v1/search",
            json.dumps({"query": '"drip irrigation"', **body}).encode(),
        )
        assert reply.status == 200, reply.body
        assert [h["path"] for h in reply.body["hits"]][:1] == ["Garden/Watering.md"]


def test_a_kind_filter_keeps_the_files_of_that_kind(served: Served) -> None:
    for kinds, expected in ((["note"], ["Garden/Watering.md"]), (["pdf", "canvas"], [])):
        body = json.dumps({"query": "drip irrigation", "kinds": kinds}).encode()
        reply = call(served.sock, "POST", "/v1/search", body)
        assert reply.status == 200, reply.body
        assert [h["path"] for h in reply.body["hits"]][:1] == expected
        assert {h["kind"] for h in reply.body["hits"]} <= set(kinds)
    body = json.dumps({"query": "x", "kinds": ["slide"]}).encode()
    reply = call(served.sock, "POST", "/v1/search", body)
    assert reply.status == 400 and "kinds" in json.dumps(reply.body)


# -- the schema-driven fuzz ------------------------------------------------------------------------

FUZZ = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Fields whose valid values the document describes in words: drawn from valid values only.
WORDS: dict[str, st.SearchStrategy[Any]] = {
    "query": st.sampled_from(["garden", "compost pile", "sourdough bread", '"drip irrigation"']),
    "path_prefix": st.sampled_from(["", "Garden", "Garden/", "Kitchen/Bread Recipe.md"]),
    "since": st.sampled_from(["2021-01-01", "2021-01-01T10:00:00+02:00", 1_600_000_000, 0]),
    "wait_for": st.sampled_from(["idle", *NOTES]),
    "timeout": st.sampled_from([5, 10]),
    "paths": st.lists(st.sampled_from(list(NOTES)), max_size=2),
    "where": st.sampled_from([{"status": "done"}, {"year": {"$gte": 2020}}, {"k": {"$in": [1]}}]),
    "prefix": st.sampled_from(["", "garden", "#home"]),
    "tags": st.lists(st.sampled_from(["garden", "home", "cooking"]), max_size=3),
    "tags_any": st.lists(st.sampled_from(["garden", "reise"]), max_size=3),
}
#: Never drawn valid: a line range is judged against the note's lines, and a page range is
#: refused for a note that is not a PDF (the fuzz vault holds none).
RANGED = {"start_line", "end_line", "start_page", "end_page"}


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under `schema`: the keywords the generated document uses."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(s) for s in schema["anyOf"] if s.get("type") != "null"])
    kind = schema.get("type")
    if kind == "integer":
        return st.integers(schema.get("minimum", -5), schema.get("maximum", 500))
    if kind == "number":
        return st.integers(schema.get("minimum", 0), 60)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return st.text("abc", min_size=1, max_size=5)
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {})), max_size=2)
    return st.just({})


#: Values no schema of the document's kind allows, by kind.
WRONG = {
    "integer": st.sampled_from(["three", 2.5, True, [1]]),
    "number": st.sampled_from(["soon", [1], {"a": 1}]),
    "boolean": st.sampled_from(["maybe", 2, [True]]),
    "string": st.sampled_from([5, ["x"], {"a": 1}]),
    "array": st.sampled_from(["garden", 3, {"a": 1}]),
    "object": st.sampled_from(["status", 3, [1]]),
}
#: Out of range, for a field with bounds.
WRONG_QUERY = {"integer": st.sampled_from(["three", "2.5"]), "boolean": st.just("maybe")}


def kind_of(schema: dict[str, Any]) -> str | None:
    kinds = [s.get("type") for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    return kinds[0] if len(kinds) == 1 and isinstance(kinds[0], str) else None


def out_of_range(schema: dict[str, Any]) -> list[int]:
    out = []
    for member in schema.get("anyOf", [schema]):
        if "minimum" in member:
            out.append(member["minimum"] - 1)
        if "maximum" in member:
            out.append(member["maximum"] + 1)
    return out


@st.composite
def request(
    draw: st.DrawFn, fields: dict[str, dict[str, Any]], required: set[str], get: bool
) -> dict[str, Any]:
    """A valid request of these fields (name → schema), then maybe one mutation of it."""
    body: dict[str, Any] = {}
    for name, schema in fields.items():
        if name in required or (name not in RANGED and draw(st.booleans())):
            body[name] = draw(WORDS[name]) if name in WORDS else draw(from_schema(schema))
    wrong = WRONG_QUERY if get else WRONG
    choices = ["none", "unknown"] + [n for n in fields if n not in ("path",)]
    which = draw(st.sampled_from(choices))
    if which == "unknown":
        body[draw(st.sampled_from(["limit", "kk", "q", "Query"]))] = 2
    elif which != "none":
        schema = fields[which]
        kind = kind_of(schema)
        pool = [*out_of_range(schema)]
        if kind in wrong:
            pool += [draw(wrong[kind])]
        if "enum" in schema:
            pool.append("fuzzy")
        if which in required and not get:
            pool.append(KeyError)
        if pool:
            value = draw(st.sampled_from(pool))
            if value is KeyError:
                del body[which]
            else:
                body[which] = value
    return body


def body_schema(served: Served, route: str) -> dict[str, Any]:
    content = served.operation("POST", route)["requestBody"]["content"]
    schema: dict[str, Any] = content["application/json"]["schema"]
    return schema


def query_schema(served: Served, route: str) -> dict[str, Any]:
    """A GET's parameters as one object's schema (the deprecated ones left out)."""
    params = [p for p in served.operation("GET", route)["parameters"] if not p.get("deprecated")]
    return {
        "type": "object",
        "properties": {p["name"]: p["schema"] for p in params},
        "required": [p["name"] for p in params if p["required"]],
        "additionalProperties": False,
    }


def as_query(params: dict[str, Any]) -> str:
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        for item in value if isinstance(value, list) else [value]:
            text = json.dumps(item) if isinstance(item, bool | dict | list) else str(item)
            pairs.append((name, text))
    return urlencode(pairs)


def agrees(served: Served, schema: dict[str, Any], instance: Any, reply: Reply) -> None:
    allowed = jsonschema.Draft202012Validator(schema).is_valid(instance)
    # A wait that timed out was accepted all the same; a 5xx never is an answer.
    accepted = reply.status != 400
    assert reply.status in (200, 202, 400) or reply.body["error"]["code"] == "timeout", reply.body
    assert allowed == accepted, (instance, reply.body)


POSTED = [op.route for op in OPERATIONS if op.method == "POST"]
QUERIED = [op.route for op in OPERATIONS if op.method == "GET" and not (op.stream or op.sse)]


@FUZZ
@given(data=st.data())
def test_the_server_accepts_exactly_the_bodies_the_document_allows(
    served: Served, data: st.DataObject
) -> None:
    route = data.draw(st.sampled_from(POSTED))
    schema = body_schema(served, route)
    fields = {n: s for n, s in schema["properties"].items() if not s.get("deprecated")}
    body = data.draw(request(fields, set(schema.get("required", [])), get=False))
    reply = call(served.sock, "POST", route, json.dumps(body).encode())
    agrees(served, schema, body, reply)


@FUZZ
@given(data=st.data())
def test_the_server_accepts_exactly_the_parameters_the_document_allows(
    served: Served, data: st.DataObject
) -> None:
    route = data.draw(st.sampled_from(QUERIED))
    schema = query_schema(served, route)
    fields = {n: s for n, s in schema["properties"].items() if n != "path"}
    params = data.draw(request(fields, set(schema["required"]) - {"path"}, get=True))
    reply = call(served.sock, "GET", target_of(route, as_query(params)))
    if "{path}" in route:
        params["path"] = NOTE
    # A query string holds text: a number or a flag is judged as what it spells.
    typed = {
        n: json.loads(v) if isinstance(v, str) and v in ("true", "false") else v
        for n, v in params.items()
    }
    agrees(served, schema, typed, reply)
