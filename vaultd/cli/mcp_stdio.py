"""`vaultd mcp`'s transport: the MCP SDK's stdio server, with every line it cannot take
answered (JSON-RPC's parse and invalid-request errors) instead of dropped."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


async def serve_stdio(server: Any) -> None:
    """The SDK's stdio transport, with every line it cannot take answered.

    The transport hands such a line on as an exception, and the SDK's server drops it with a
    debug log: the client would wait for an answer that never comes. JSON-RPC's rule is an
    error with id null (-32700 for what is no JSON, -32600 for JSON that is no message). So
    the server reads the transport through a stream that passes messages on, in order, and
    answers each exception on the write stream.
    """
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async, with our read stream
    async with stdio_server() as (read_stream, write_stream):
        messages, received = anyio.create_memory_object_stream[Any]()

        async def answering() -> None:
            async with messages:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        await write_stream.send(_rejection(item))
                    else:
                        await messages.send(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(answering)
            await lowlevel.run(received, write_stream, lowlevel.create_initialization_options())


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
