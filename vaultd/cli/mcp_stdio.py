"""`vaultd mcp`'s transport: the MCP SDK's stdio server, with every line it cannot take
answered (JSON-RPC's parse and invalid-request errors) instead of dropped."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from pydantic import ValidationError


async def serve_stdio(server: Any) -> None:
    """The SDK's stdio transport, with every line it cannot take answered.

    The transport hands such a line on as an exception, and the SDK's server drops it with a
    debug log: the client would wait for an answer that never comes. JSON-RPC's rule is an
    error with id null (-32700 for what is no JSON, -32600 for JSON that is no message).
    """
    from mcp.server.stdio import stdio_server

    lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async, with our read stream
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(
            _Answering(read_stream, write_stream),
            write_stream,
            lowlevel.create_initialization_options(),
        )


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


class _Answering:
    """A read stream passing on the transport's messages and answering, on the write stream,
    each exception it yields for a line it could not take."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        # The SDK runs each handler in the context its message was sent in.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._write.send(_rejection(item))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Answering:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _Answering:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()
