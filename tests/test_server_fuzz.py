"""Schema-driven fuzzing of the socket API: no 5xx, and every answer matches /openapi.json.

Why hypothesis and not schemathesis: schemathesis sends its requests with `requests` (or calls an
ASGI/WSGI app in-process); reaching a Unix socket would take a transport adapter and a stack of
dependencies, and it would not exercise the real server the way a raw connection does. Here the
request bodies come from the request schemas that the running daemon serves at /openapi.json,
through a small JSON-schema → strategy translation of exactly the keywords those schemas use
(type, properties, required, enum, minimum/maximum, minLength, maxItems, items), so a schema
change changes what is generated. (hypothesis-jsonschema would do the same translation for full
JSON Schema but knows no OpenAPI 3.0 keywords such as `nullable`; it is not needed for this
subset.) Valid bodies are then mutated: a field of the wrong type, unknown fields, lone
surrogates, non-objects, arbitrary bytes, broken UTF-8, NaN, huge numbers and 10k-deep nesting.

Every body is POSTed over the daemon's real socket. Each response must be JSON, must not be a
5xx, must carry a status that the operation documents, and must validate against that status's
schema (jsonschema, with `nullable` translated). The daemon must stay healthy afterwards.
Runs are reproducible: derandomized, no example database, a bounded number of examples.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.daemon import RunningDaemon, short_socket_dir
from harness.vaults import NOTES, write_vault
from tests.test_server import Reply, call, start_daemon

FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: wait_for may block up to its timeout; keep generated timeouts short so the run stays short.
MAX_FUZZ_TIMEOUT = 0.5


@dataclass
class Target:
    daemon: RunningDaemon
    openapi: dict[str, Any]

    @property
    def sock(self) -> Path:
        return self.daemon.socket

    def operation(self, method: str, path: str) -> dict[str, Any]:
        op: dict[str, Any] = self.openapi["paths"][path][method.lower()]
        return op

    def request_schema(self, path: str) -> dict[str, Any]:
        body = self.operation("POST", path)["requestBody"]
        schema: dict[str, Any] = body["content"]["application/json"]["schema"]
        return schema


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    work = tmp_path_factory.mktemp("fuzz")
    vault = write_vault(work / "vault")
    runtime = short_socket_dir()
    daemon = start_daemon(vault, work, runtime)
    try:
        doc = call(daemon.socket, "GET", "/openapi.json").body
        yield Target(daemon, doc)
    finally:
        daemon.stop()
        shutil.rmtree(runtime, ignore_errors=True)


# -- JSON schema → hypothesis --------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def from_schema(schema: dict[str, Any], overrides: dict[str, st.SearchStrategy[Any]]) -> Any:
    """A strategy for values valid under `schema` (the subset of keywords our API uses)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        strategies = {
            name: overrides[name] if name in overrides else from_schema(sub, overrides)
            for name, sub in properties.items()
        }
        return st.fixed_dictionaries(
            {n: s for n, s in strategies.items() if n in required},
            optional={n: s for n, s in strategies.items() if n not in required},
        )
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=40)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        low, high = schema.get("minimum"), schema.get("maximum")
        return st.integers(low, high) | st.floats(low, high, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        items = from_schema(schema.get("items", {}), overrides)
        return st.lists(items, max_size=min(schema.get("maxItems", 6), 6))
    return json_values


def vault_paths() -> st.SearchStrategy[str]:
    known = st.sampled_from([*NOTES, "Missing/Note.md", "Garden", "idle"])
    return known | st.text(min_size=1, max_size=30)


OVERRIDES: dict[str, st.SearchStrategy[Any]] = {
    "wait_for": vault_paths(),
    "timeout": st.floats(0, MAX_FUZZ_TIMEOUT) | st.just(0),
    "paths": st.lists(vault_paths(), max_size=4),
}


def mutated(valid: st.SearchStrategy[dict[str, Any]], fields: list[str]) -> Any:
    """Valid bodies with one field given any JSON value, or with unknown fields added."""

    @st.composite
    def wrong_field(draw: st.DrawFn) -> dict[str, Any]:
        body = dict(draw(valid))
        body[draw(st.sampled_from(fields))] = draw(json_values)
        return body

    @st.composite
    def extra_fields(draw: st.DrawFn) -> dict[str, Any]:
        body = dict(draw(valid))
        body.update(draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3)))
        return body

    @st.composite
    def surrogate(draw: st.DrawFn) -> dict[str, Any]:
        body = dict(draw(valid))
        name = draw(st.sampled_from(fields))
        body[name] = draw(st.sampled_from(["\ud800", "a\udfffb", "\udc80.md"]))
        return body

    return wrong_field() | extra_fields() | surrogate()


def encoded(bodies: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return bodies.map(lambda body: json.dumps(body).encode())


def raw_bodies() -> st.SearchStrategy[bytes]:
    return (
        st.binary(max_size=200)
        | encoded(json_values)
        | st.text(max_size=60).map(lambda t: t.encode("utf-8"))
        # Valid JSON broken as UTF-8 at a random place.
        | st.tuples(
            encoded(json_values), st.integers(0, 50), st.sampled_from([b"\xff", b"\xc3"])
        ).map(lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :])
    )


@st.composite
def requests(draw: st.DrawFn, target: Target) -> tuple[str, bytes]:
    path = draw(st.sampled_from(["/v1/search", "/v1/reindex"]))
    schema = target.request_schema(path)
    valid = from_schema(schema, OVERRIDES)
    fields = list(schema["properties"])
    # Valid bodies twice as often as each kind of invalid one: they reach the deepest code.
    body = draw(
        st.one_of(encoded(valid), encoded(valid), encoded(mutated(valid, fields)), raw_bodies())
    )
    return path, body


# -- response checks -----------------------------------------------------------------------------


def json_schema(schema: Any) -> Any:
    """OpenAPI 3.0 schema → JSON Schema: `nullable: true` becomes a null type."""
    if isinstance(schema, list):
        return [json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: json_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def check(target: Target, method: str, path: str, reply: Reply) -> None:
    assert reply.status < 500, (path, reply.raw[:500])
    assert reply.headers.get("content-type") == "application/json"
    responses = target.operation(method, path)["responses"]
    assert str(reply.status) in responses, f"{method} {path}: undocumented {reply.status}"
    schema = responses[str(reply.status)]["content"]["application/json"]["schema"]
    jsonschema.validate(reply.body, json_schema(schema))


def post_raw(target: Target, path: str, body: bytes) -> Reply:
    return call(target.sock, "POST", path, body, timeout=30)


# -- the fuzzing ---------------------------------------------------------------------------------

DEEP = 10_000


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"query": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        b'{"query": "x", "tags": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}",
        b'{"query": "x", "timeout": NaN, "wait_for": "Garden/Compost.md"}',
        b'{"query": "x", "timeout": Infinity}',
        b'{"query": "x", "timeout": 1e999}',
        b'{"query": "x", "timeout": ' + b"9" * 400 + b', "wait_for": "idle"}',
        b'{"query": "x", "k": ' + b"9" * 5000 + b"}",
        b'{"query": "x", "tags": [' + b",".join([b'"t"'] * 5000) + b"]}",
        b'{"query": "x", "wait_for": "a\\u0000b.md"}',
        b'{"query": "\\ud800"}',
        b'{"query": "x"}\x00',
        b"\xef\xbb\xbf{}",
    ],
    ids=[
        "deep-array",
        "deep-query",
        "deep-object",
        "nan",
        "infinity",
        "overflow-float",
        "huge-int-timeout",
        "too-many-digits",
        "many-tags",
        "nul-path",
        "lone-surrogate",
        "trailing-nul",
        "bom",
    ],
)
@pytest.mark.parametrize("path", ["/v1/search", "/v1/reindex"])
def test_hostile_bodies(target: Target, path: str, body: bytes) -> None:
    reply = post_raw(target, path, body)
    check(target, "POST", path, reply)


def test_reindex_never_takes_a_path_out_of_the_vault_or_one_the_os_refuses(
    target: Target,
) -> None:
    for paths in (["../outside.md"], ["a/../../b.md"], ["a\x00b.md"], ["\ud800.md"]):
        reply = post_raw(target, "/v1/reindex", json.dumps({"paths": paths}).encode())
        check(target, "POST", "/v1/reindex", reply)
        assert reply.status == 400, paths
    target.daemon.wait_idle()
    assert call(target.sock, "GET", "/v1/health").body["status"] == "ok"


@FUZZ
@given(data=st.data())
def test_fuzz_posted_bodies(target: Target, data: st.DataObject) -> None:
    path, body = data.draw(requests(target), label="request")
    check(target, "POST", path, post_raw(target, path, body))


@settings(FUZZ, max_examples=100)
@given(name=st.text(max_size=40) | st.sampled_from(list(NOTES)))
def test_fuzz_note_paths(target: Target, name: str) -> None:
    reply = call(target.sock, "GET", "/v1/notes/" + quote(name, safe="/"))
    check(target, "GET", "/v1/notes/{path}", reply)
    if name in NOTES:
        assert reply.status == 200
        assert reply.body["path"] == name


def test_the_daemon_is_healthy_after_the_fuzzing(target: Target) -> None:
    target.daemon.wait_idle()
    assert target.daemon.process.poll() is None
    health = call(target.sock, "GET", "/v1/health").body
    assert health["status"] == "ok" and "reason" not in health, health
    status = call(target.sock, "GET", "/v1/status").body
    assert status["failed"] == []
    assert status["notes"] == len(NOTES)
    hits = target.daemon.search("garden watering", k=1)
    assert hits[0]["path"] == "Garden/Watering.md"
    assert "request failed" not in target.daemon.log_text()


def test_the_status_is_what_the_schema_says_key_for_key(target: Target) -> None:
    """The schema says `additionalProperties: false`: a key the daemon sends is documented."""
    check(target, "GET", "/v1/status", call(target.sock, "GET", "/v1/status"))
