"""The socket API's route table: each request routed by the operation table
(vaultd.api.operations), checked by its operation's model, answered by the service and sent as
its response model (JSON, JSON lines or server-sent events). The transport (vaultd.api.server)
reads and writes the bytes, holds the limits, and decides where each step runs: routing on its
event loop, a search's long poll as an await there, the answer in a worker thread."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel

from vaultd.api.limits import MAX_WAIT
from vaultd.api.operations import (
    OPERATIONS,
    Operation,
    Request,
    SearchRequest,
    checked,
    list_fields,
)
from vaultd.errors import ApiError, NoteError, NoteUnavailableError, QueryError, VaultPathError

if TYPE_CHECKING:
    from vaultd.api.service import Service


@dataclass(frozen=True, slots=True)
class Lines:
    """An answer sent item by item: JSON lines, streamed (`items` a generator, read in a worker
    thread), or server-sent events (`sse`: an async generator, awaited on the event loop) until
    the client goes away. Closing `items` ends the answer's subscription or read of the store."""

    items: Generator[Any, None, None] | AsyncGenerator[Any, None]
    sse: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    """A request routed and checked: its operation, and its request as the operation's model."""

    op: Operation
    request: Request

    @property
    def waits(self) -> tuple[str, float] | None:
        """What a search waits for (`wait_for`) and for how long at most, if it does."""
        request = self.request
        if isinstance(request, SearchRequest) and request.wait_for is not None:
            return request.wait_for, min(request.timeout, MAX_WAIT)
        return None


class Api:
    """The route table (see the module); ApiError for anything the client got wrong."""

    def __init__(self, service: Service) -> None:
        self.service = service
        # In the table's order, a note's views before the note: a note's path ends in .md,
        # never in /related, so none is shadowed.
        self.routes = [(op, _route_pattern(op.route)) for op in OPERATIONS]

    def route(self, method: str, target: str, body: bytes) -> Call:
        """The operation `method` and `target` ask for, with the request checked by its model:
        quick, no I/O (the transport calls it on its event loop)."""
        url = urlsplit(target)
        found = [(op, m) for op, pattern in self.routes if (m := pattern.fullmatch(url.path))]
        if not found:
            raise ApiError(HTTPStatus.NOT_FOUND, "not_found", f"no route {url.path}")
        route = found[0][0].route
        methods = {op.method: (op, m) for op, m in found if op.route == route}
        if method not in methods:
            raise ApiError(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{method} is not supported on {url.path}; use {' or '.join(methods)}",
                allow=tuple(methods),
            )
        op, match = methods[method]
        with _refusals():
            return Call(op, _request(op, match, url.query, body))

    def answer(self, call: Call) -> tuple[HTTPStatus, Any]:
        """The service's answer to a routed call; blocking (the index is read). A search's
        `wait_for` is not waited for here: the transport awaits `wait` first."""
        with _refusals():
            return self._answer(call.op, call.request)

    def handle(self, method: str, target: str, body: bytes) -> tuple[HTTPStatus, Any]:
        """A request answered in process, without a transport (and so without a long poll:
        `wait_for` is checked, never waited for)."""
        return self.answer(self.route(method, target, body))

    async def wait(self, call: Call) -> None:
        """A search's long poll: returns once its `wait_for` is indexed, or raises the 503
        saying it was not within its timeout."""
        waits = call.waits
        if waits is None:
            return
        target, timeout = waits
        if not await self.service.until(target, timeout):
            late = "the vault" if target == "idle" else repr(target)
            raise ApiError(
                HTTPStatus.SERVICE_UNAVAILABLE,
                "timeout",
                f"{late} was not indexed within {timeout:g} s; ask again to wait longer "
                f"(a search waits at most {MAX_WAIT:g} s)",
            )

    def _answer(self, op: Operation, request: Request) -> tuple[HTTPStatus, Any]:
        if op.name == "openapi":
            from vaultd.api.openapi import schema

            return HTTPStatus.OK, schema()
        answer = getattr(self.service, op.name)(request)
        if op.sse:
            return HTTPStatus(op.status), Lines(_dumped_each(answer), sse=True)
        if op.stream:
            return HTTPStatus(op.status), Lines(_dumped_all(answer))
        return HTTPStatus(op.status), _dumped(answer)


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The package's errors for what was asked badly, as the API's refusals."""
    try:
        yield
    except (QueryError, VaultPathError) as exc:
        field = exc.field if isinstance(exc, QueryError) else None
        raise ApiError(HTTPStatus.BAD_REQUEST, "bad_request", str(exc), field=field) from None
    except NoteUnavailableError as exc:
        raise ApiError(HTTPStatus.NOT_FOUND, "not_found", str(exc), kind=exc.kind) from None
    except NoteError as exc:
        raise ApiError(HTTPStatus.UNPROCESSABLE_ENTITY, "unreadable", str(exc)) from None


def _route_pattern(route: str) -> re.Pattern[str]:
    return re.compile(re.escape(route).replace(re.escape("{path}"), "(?P<path>.+)"))


def _dumped(answer: BaseModel) -> Any:
    # Optional keys left unset are not sent: a hit with a snippet has no text.
    return answer.model_dump(mode="json", exclude_unset=True)


def _dumped_all(answers: Iterator[BaseModel]) -> Generator[Any, None, None]:
    """Each answer dumped as it comes; closing this closes the answers' iterator (an event
    stream's subscription ends with it, an export's read of the store)."""
    try:
        for answer in answers:
            yield _dumped(answer)
    finally:
        close = getattr(answers, "close", None)
        if close is not None:
            close()


async def _dumped_each(answers: AsyncIterator[BaseModel]) -> AsyncGenerator[Any, None]:
    """`_dumped_all` for answers awaited as they come (an event stream)."""
    try:
        async for answer in answers:
            yield _dumped(answer)
    finally:
        close = getattr(answers, "close", None)
        if close is not None:
            close()


def _request(op: Operation, match: re.Match[str], query: str, body: bytes) -> Request:
    """The request as its operation's model: a GET's query string (a repeated parameter is a
    list where the field is one, else its last value counts) or a POST's JSON body (strictly
    typed: "3" is no number), and the note's path from the route. QueryError (400) naming the
    field."""
    if op.method == "GET":
        lists = list_fields(op.request)
        data: dict[str, Any] = {
            name: values if name in lists else values[-1]
            for name, values in parse_qs(query).items()
        }
        strict = False
    else:
        data = _json_body(body)
        strict = True
    if "path" in match.groupdict():
        data["path"] = unquote(match["path"])
    return checked(op.request, data, strict=strict)


def _json_body(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_no_constant)
        # "\ud800" escapes decode to lone surrogates, which no tokenizer or database takes.
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise ApiError(HTTPStatus.BAD_REQUEST, "bad_json", f"the body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(HTTPStatus.BAD_REQUEST, "bad_json", "the body must be a JSON object")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
