"""The API's OpenAPI 3.1 document (`GET /openapi.json`), generated from the operation table
(vaultd.api.operations): each operation's route, method, parameters or body, answers and
summary come from its declaration, so the document and the server cannot disagree.

OpenAPI 3.1 because its schemas are JSON Schema 2020-12, which the models' schemas are. Every
schema is written out in place (no `$ref`), so one operation's part can be checked alone.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from vaultd import __version__
from vaultd.api.limits import MAX_BODY
from vaultd.api.operations import OPERATIONS, ErrorResponse, Operation, deprecated_aliases

_ERROR_NAMES = {
    400: "Bad input: a malformed request (request line, an HTTP version other than 1.x, a "
    "Content-Length that is not one header of plain digits), a body that is not a JSON object, "
    "an unknown field, a field of the wrong type or out of range, or a path out of the vault",
    404: "Unknown note or route",
    405: "The route does not take this method; the Allow header lists those it takes",
    411: "Length required: a body sent chunked",
    413: f"Body over {MAX_BODY} bytes",
    414: "Request line too long",
    422: "The note on disk cannot be parsed (binary, not UTF-8 text), or has no outline (a "
    "PDF, a canvas, a drawing or source code is no note)",
    431: "Header lines too long, or too many of them",
    503: "Not ready (starting), timed out (wait_for), a store error, or busy (too many requests)",
}

#: Any route answers these, whatever its operation: the request's framing is judged first.
_FRAMING = (400, 411, 413, 414, 431, 503)

_DESCRIPTION = (
    "The local API of the vaultd daemon, served on a Unix socket. Every error is "
    '{"error": {"code", "message"}}. A field a request does not declare is refused (400, '
    "naming it). A known route asked with a method it does not take (HEAD, OPTIONS, PUT, ...) "
    "answers 405 with an Allow header; an unknown route 404; a malformed request 400 (the "
    "connection is closed after it). 500 is only ever a bug. Parameters marked deprecated are "
    "old names, taken for one release."
)


@functools.cache
def schema() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.route, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "vaultd", "version": __version__, "description": _DESCRIPTION},
        "components": {
            "responses": {
                "MethodNotAllowed": {
                    **_json(model_schema(ErrorResponse), _ERROR_NAMES[405]),
                    "headers": {
                        "Allow": {
                            "description": "The methods the route takes, e.g. `GET`",
                            "schema": {"type": "string"},
                        }
                    },
                }
            }
        },
        "paths": paths,
    }


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema with every `$ref` written out in place."""
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = inline(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {**target, **{k: inline(v) for k, v in node.items() if k != "$ref"}}
        return {k: inline(v) for k, v in node.items()}

    out: dict[str, Any] = inline(raw)
    return out


def request_schema(op: Operation) -> dict[str, Any]:
    """The request's schema, old spellings of renamed fields among its properties, deprecated."""
    out = model_schema(op.request)
    properties = out.setdefault("properties", {})
    for old, new in deprecated_aliases(op.request).items():
        properties[old] = {
            **properties[new],
            "deprecated": True,
            "description": f"Deprecated: the old name of `{new}`, taken for one release.",
        }
        # One name or the other: both at once is refused.
        out.setdefault("allOf", []).append({"not": {"required": [new, old]}})
    out.pop("description", None)  # the operation's own, said once
    return out


def _operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": op.name, "summary": op.summary}
    if description := op.doc.partition("\n\n")[2].replace("\n", " "):
        out["description"] = description
    out["x-read-only"] = op.read_only
    request = request_schema(op)
    if op.method == "GET":
        # The note's path first, as the route has it.
        names = sorted(request["properties"], key=lambda name: name != "path")
        out["parameters"] = [
            _parameter(name, request["properties"][name], op, name in request.get("required", ()))
            for name in names
        ]
    else:
        out["requestBody"] = {
            "required": bool(request.get("required")),
            "content": {"application/json": {"schema": request}},
        }
    answer = model_schema(op.response)
    mime = "application/x-ndjson" if op.stream else "application/json"
    summary = "One JSON line per record" if op.stream else "The answer"
    if op.sse:
        mime, summary = "text/event-stream", "Server-sent events, each one's data this object"
    error = model_schema(ErrorResponse)
    out["responses"] = {
        str(op.status): {"description": summary, "content": {mime: {"schema": answer}}},
        **{str(c): _json(error, _ERROR_NAMES[c]) for c in sorted({*op.errors, *_FRAMING})},
    }
    return out


def _parameter(name: str, prop: dict[str, Any], op: Operation, required: bool) -> dict[str, Any]:
    in_path = name == "path" and "{path}" in op.route
    schema = {k: v for k, v in prop.items() if k not in ("description", "deprecated", "title")}
    out: dict[str, Any] = {
        "name": name,
        "in": "path" if in_path else "query",
        "required": in_path or required,
        "schema": schema,
    }
    if "description" in prop:
        out["description"] = prop["description"]
    if prop.get("deprecated"):
        out["deprecated"] = True
    return out


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}
