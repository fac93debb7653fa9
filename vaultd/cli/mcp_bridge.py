"""`vaultd mcp`: a stdio MCP server for AI tools, forwarding to the running daemon's socket.

The bridge holds no index of its own: every tool call is one request to the daemon (the same
API as `vaultd search`), so it starts in well under a second and never takes the data
directory's lock. It never reads the vault itself: the daemon reads a note for `read_note`,
and only a note it has indexed and its rules still admit, so ignore rules (a private folder
left out of the index) hold for the assistant too.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from pydantic import Field, ValidationError

from vaultd import __version__
from vaultd.api.client import Client
from vaultd.api.limits import MAX_BODY
from vaultd.errors import DaemonError, NoDaemonError, QueryError, VaultdError, VaultPathError
from vaultd.query import MAX_QUERY_CHARS, check_query
from vaultd.vaultpath import vault_path

INSTRUCTIONS = (
    "Tools over the user's Obsidian vault, kept indexed by the vaultd daemon. Use `search` to "
    "find passages (each hit has a note path and a 1-based line range), `read_note` to read a "
    "whole note or just those lines (`outline` gives each section's lines), `links` to follow "
    "a note's links and backlinks, `related` for the notes most related to a note by meaning "
    "and words (linked or not), `unlinked_mentions` for notes naming it without a link, and "
    "`tags` and `recent_notes` to find one's way in. Ask `search` for `snippets` to get short "
    "passages with the matched terms marked **like this**."
)

#: What a search hit tells the assistant (the chunk id and score parts are vaultd's business);
#: "text" or, when snippets are asked for, "snippet".
HIT_FIELDS = ("path", "title", "section", "start_line", "end_line", "score", "tags")


def _tool_error(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


class Bridge:
    """The tools' logic: requests to the daemon, answers as plain data."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _request(self, method: str, target: str, body: Any = None) -> Any:
        if body is not None:
            # The daemon cuts a body over its limit while it arrives, and the broken send would
            # read as a daemon gone: say what is too big before sending any of it.
            size = len(json.dumps(body).encode())
            if size > MAX_BODY:
                raise _tool_error(
                    f"the request is {size} bytes; the daemon takes at most {MAX_BODY} bytes "
                    "(fewer or shorter tags, or a shorter query)"
                )
        try:
            return self.client.request(method, target, body)
        except DaemonError as exc:
            raise _tool_error(str(exc)) from exc
        except VaultdError as exc:
            if self.client.reachable():
                raise _tool_error(
                    f"the vaultd daemon on {self.client.path} is running but did not answer "
                    f"this request ({exc})"
                ) from exc
            raise _tool_error(
                f"the vaultd daemon is not running (or not answering) on {self.client.path}; "
                f"start it with `vaultd run` or `systemctl --user start vaultd` ({exc})"
            ) from exc

    def note(self, path: str, **query: int | str | None) -> dict[str, Any]:
        try:
            name = vault_path(path)  # the daemon's own rule, said here before any request
        except VaultPathError as exc:
            raise _tool_error(str(exc)) from exc
        params = urlencode({k: v for k, v in query.items() if v is not None})
        target = "/v1/notes/" + quote(name) + (f"?{params}" if params else "")
        found: dict[str, Any] = self._request("GET", target)
        return found

    def search(
        self,
        query: str,
        k: int,
        mode: str,
        tags: list[str],
        path_prefix: str,
        snippets: bool = False,
    ) -> dict[str, Any]:
        try:
            check_query(query)  # the rule every way in shares, with its message
        except QueryError as exc:
            raise _tool_error(str(exc)) from exc
        body = {
            "query": query,
            "k": k,
            "mode": mode,
            "tags": tags,
            "path_prefix": path_prefix,
            "snippets": snippets,
        }
        hits = self._request("POST", "/v1/search", body)["hits"]
        passage = "snippet" if snippets else "text"
        return {"hits": [{key: hit[key] for key in (*HIT_FIELDS, passage)} for hit in hits]}

    def read_note(self, path: str, start_line: int | None, end_line: int | None) -> dict[str, Any]:
        # The daemon reads the file: only indexed notes, the rules as they are now, and never
        # through a symlink swapped in for the note (see Discovery.open_note).
        note = self.note(path, text="1", start_line=start_line, end_line=end_line)
        return {
            "path": path,
            "title": note.get("title", ""),
            "start_line": note["start_line"],
            "end_line": note["end_line"],
            "total_lines": note["total_lines"],
            "text": note["text"],
        }

    def related(self, path: str, k: int, exclude_linked: bool) -> dict[str, Any]:
        try:
            name = vault_path(path)
        except VaultPathError as exc:
            raise _tool_error(str(exc)) from exc
        params = urlencode({"k": k, **({"exclude_linked": "1"} if exclude_linked else {})})
        found = self._request("GET", f"/v1/notes/{quote(name)}/related?{params}")
        return {"path": name, "related": found["related"]}

    def _view(self, path: str, view: str, **query: int) -> dict[str, Any]:
        try:
            name = vault_path(path)
        except VaultPathError as exc:
            raise _tool_error(str(exc)) from exc
        params = f"?{urlencode(query)}" if query else ""
        found: dict[str, Any] = self._request("GET", f"/v1/notes/{quote(name)}/{view}{params}")
        return found

    def mentions(self, path: str, k: int) -> dict[str, Any]:
        return self._view(path, "mentions", k=k)

    def outline(self, path: str) -> dict[str, Any]:
        return self._view(path, "outline")

    def tags(self, prefix: str) -> dict[str, Any]:
        query = f"?{urlencode({'prefix': prefix})}" if prefix else ""
        found: dict[str, Any] = self._request("GET", f"/v1/tags{query}")
        return found

    def recent(self, k: int, since: str | None) -> dict[str, Any]:
        params = urlencode({"k": k, **({"since": since} if since else {})})
        found: dict[str, Any] = self._request("GET", f"/v1/recent?{params}")
        return found

    def links(self, path: str) -> dict[str, Any]:
        note = self.note(path)
        return {
            "path": path,
            "title": note.get("title", ""),
            "links": note.get("links", []),
            "backlinks": note.get("backlinks", []),
        }


def build_server(client: Client) -> Any:
    """The MCP server with vaultd's tools, forwarding to `client`."""
    from mcp.server.mcpserver import MCPServer

    bridge = Bridge(client)
    server = MCPServer(
        name="vaultd", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
    )

    @server.tool()
    def search(
        query: Annotated[
            str,
            Field(
                description=f"What to look for, in words (at most {MAX_QUERY_CHARS} characters)."
            ),
        ],
        k: Annotated[int, Field(ge=1, le=100, description="How many hits.")] = 10,
        mode: Annotated[
            Literal["hybrid", "vector", "keyword"],
            Field(description="keyword (BM25), vector (meaning), or both fused (default)."),
        ] = "hybrid",
        tags: Annotated[
            list[str] | None,
            Field(description="Only notes with all these tags (nested tags match parents)."),
        ] = None,
        path_prefix: Annotated[
            str, Field(description="Only notes under this folder, or this exact note path.")
        ] = "",
        snippets: Annotated[
            bool,
            Field(
                description="Short snippets with the matched terms marked **like this**, "
                "instead of whole passages (the line range stays the passage's)."
            ),
        ] = False,
    ) -> dict[str, Any]:
        """Search the vault; each hit is a passage with its note path and line range."""
        return bridge.search(query, k, mode, list(tags or []), path_prefix, snippets)

    @server.tool()
    def read_note(
        path: Annotated[str, Field(description="The note's path in the vault, e.g. 'a/b.md'.")],
        start_line: Annotated[
            int | None, Field(ge=1, description="First line to read (1-based); default 1.")
        ] = None,
        end_line: Annotated[
            int | None, Field(ge=1, description="Last line to read (inclusive); default the end.")
        ] = None,
    ) -> dict[str, Any]:
        """Read a note, or the lines start_line..end_line of it (e.g. a search hit's range)."""
        return bridge.read_note(path, start_line, end_line)

    @server.tool()
    def links(
        path: Annotated[str, Field(description="The note's path in the vault, e.g. 'a/b.md'.")],
    ) -> dict[str, Any]:
        """A note's outgoing links (wiki-links and embeds) and the notes that link to it."""
        return bridge.links(path)

    @server.tool()
    def related(
        path: Annotated[str, Field(description="The note's path in the vault, e.g. 'a/b.md'.")],
        k: Annotated[int, Field(ge=1, le=100, description="How many notes.")] = 10,
        exclude_linked: Annotated[
            bool, Field(description="Leave out notes it links to or that link to it.")
        ] = False,
    ) -> dict[str, Any]:
        """The notes most related to a note, by meaning and by its distinctive words, nearest
        first: each with its
        similarity, whether the two are linked already, and the pair of passages (line ranges
        and text) that ties them."""
        return bridge.related(path, k, exclude_linked)

    @server.tool()
    def unlinked_mentions(
        path: Annotated[str, Field(description="The note's path in the vault, e.g. 'a/b.md'.")],
        k: Annotated[int, Field(ge=1, le=500, description="At most this many.")] = 50,
    ) -> dict[str, Any]:
        """Passages of other notes that name this note (its title, file name or an alias)
        without linking to it: links waiting to be made. Each has its note path, line range
        and the line with the name marked **like this**."""
        return bridge.mentions(path, k)

    @server.tool()
    def outline(
        path: Annotated[str, Field(description="The note's path in the vault, e.g. 'a/b.md'.")],
    ) -> dict[str, Any]:
        """A note's headings in order, each with its level and its section's line range (to
        read one section with read_note)."""
        return bridge.outline(path)

    @server.tool()
    def tags(
        prefix: Annotated[
            str, Field(description="Only this tag and those below it, e.g. 'project'.")
        ] = "",
    ) -> dict[str, Any]:
        """The vault's tags with how many notes hold each, most used first (a nested tag's
        notes count for its parents too)."""
        return bridge.tags(prefix)

    @server.tool()
    def recent_notes(
        k: Annotated[int, Field(ge=1, le=500, description="How many notes.")] = 20,
        since: Annotated[
            str | None,
            Field(description="Only notes changed since this ISO date or time (or epoch s)."),
        ] = None,
    ) -> dict[str, Any]:
        """The notes modified most recently, newest first: path, title, time and tags."""
        return bridge.recent(k, since)

    return server


def serve(client: Client) -> None:
    """Check that the daemon answers, then serve MCP on stdin/stdout until EOF."""
    if client.health() is None:
        raise NoDaemonError(
            f"no vaultd daemon answers on {client.path}: start it first (`vaultd run`, or "
            "`systemctl --user start vaultd`), or point --config at the vault's config"
        )
    import anyio

    anyio.run(_serve_stdio, build_server(client))


async def _serve_stdio(server: Any) -> None:
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
