"""`vaultd mcp`'s transport: the MCP SDK's stdio server, with every line it cannot take
answered (JSON-RPC's parse and invalid-request errors) instead of dropped, and every request
read before stdin closed answered before it exits."""

from __future__ import annotations

from typing import Any

import click
from pydantic import ValidationError

from vaultd.api.limits import MAX_WAIT

#: How long the requests read before stdin closed are waited for once it has: a search waits
#: up to MAX_WAIT for its note, and calls answered from the index take turns. A fault hook
#: (a test's sitecustomize) shortens it.
DRAIN = MAX_WAIT + 60.0


async def serve_stdio(server: Any) -> list[str]:
    """The SDK's stdio transport, with every line it cannot take answered, and what was asked
    before stdin closed answered before the server stops. Returns the requests given up.

    The transport hands such a line on as an exception, and the SDK's server drops it with a
    debug log: the client would wait for an answer that never comes. JSON-RPC's rule is an
    error with id null (-32700 for what is no JSON, -32600 for JSON that is no message). So
    the server reads the transport through a stream that passes messages on, in order, and
    answers each exception itself.

    The SDK's server loop ends when the stream it reads ends, and cancels the requests it has
    not answered. MCP's stdio shutdown is the client closing stdin and waiting for the server
    to exit, and a script writes its requests and closes stdin: so that stream is held open
    after stdin closes until every request passed on has its answer written (each answer goes
    out through one task, which notes it), or DRAIN is up. One given up is then cancelled with
    the rest, and the SDK answers it with its "Connection closed" error.
    """
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

    lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async, with our streams
    unanswered: dict[Any, str] = {}  # request id: what it asks
    answered = anyio.Condition()
    given_up: list[str] = []
    async with stdio_server() as (read_stream, write_stream):
        messages, received = anyio.create_memory_object_stream[Any]()
        replies, to_write = anyio.create_memory_object_stream[Any]()
        rejections = replies.clone()

        async def reading() -> None:
            async with messages, rejections:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        await rejections.send(_rejection(item))
                        continue
                    message = item.message
                    if isinstance(message, JSONRPCRequest):
                        unanswered[message.id] = _asked(message)
                    elif (
                        isinstance(message, JSONRPCNotification)
                        and message.method == "notifications/cancelled"
                    ):
                        # The SDK never answers a request its client has cancelled.
                        unanswered.pop((message.params or {}).get("requestId"), None)
                    await messages.send(item)
                with anyio.move_on_after(DRAIN):
                    async with answered:
                        while unanswered:
                            await answered.wait()
                for request, asked in unanswered.items():
                    given_up.append(asked)
                    click.echo(
                        f"vaultd mcp: gave up on request {request!r} ({asked}): no answer "
                        f"{DRAIN:g} s after stdin closed",
                        err=True,
                    )

        async def writing() -> None:
            async with write_stream, to_write:
                async for reply in to_write:
                    await write_stream.send(reply)
                    if isinstance(reply.message, JSONRPCResponse | JSONRPCError):
                        async with answered:
                            unanswered.pop(reply.message.id, None)
                            answered.notify_all()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(reading)
            tasks.start_soon(writing)
            await lowlevel.run(received, replies, lowlevel.create_initialization_options())
    return given_up


def _asked(request: Any) -> str:
    """A request's method, and for a tool call the tool's name."""
    tool = (request.params or {}).get("name") if request.method == "tools/call" else None
    return f"{request.method} {tool}" if isinstance(tool, str) else str(request.method)


def _rejection(error: Exception) -> Any:
    from mcp.shared.message import SessionMessage
    from mcp_types import ErrorData, JSONRPCError
    from mcp_types.jsonrpc import INVALID_REQUEST, PARSE_ERROR

    not_json = isinstance(error, ValidationError) and any(
        e["type"] == "json_invalid" for e in error.errors()
    )
    if not_json:
        data = ErrorData(code=PARSE_ERROR, message="Parse error: the line is not JSON")
    else:
        data = ErrorData(
            code=INVALID_REQUEST,
            message="Invalid Request: the line is JSON but no JSON-RPC 2.0 message",
        )
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=None, error=data))
