"""`vaultd mcp`: a stdio MCP server for AI tools, answering from the vault's daemon or index.

With a daemon running, every tool call is one request to it (the same API as `vaultd search`),
so the bridge starts in well under a second and never takes the data directory's lock. It
never reads the vault itself: the daemon reads a note for `read_note`, and only a note it has
indexed and its rules still admit, so ignore rules (a private folder left out of the index)
hold for the assistant too.

With no daemon (never started, or stopped mid-session) the same requests are answered by the
same routes over the index opened read-only for the call, as `vaultd search` does without a
daemon: the lock is held only while a call runs, so a daemon started later is not kept out.

An MCP client shows the user nothing of a server's stderr, and a server that exits shows only
"Connection closed". So whatever is wrong (no vault configured, a config that does not load,
no index yet) the bridge still starts and answers each tool call with an error saying what is
wrong and the command that fixes it, and says so in `initialize`'s instructions.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol
from urllib.parse import quote, urlencode

import click
from pydantic import Field, ValidationError

from vaultd import __version__
from vaultd.api.client import Client
from vaultd.api.limits import MAX_BODY
from vaultd.errors import (
    ConfigError,
    DaemonError,
    QueryError,
    VaultdError,
    VaultPathError,
)
from vaultd.query import MAX_QUERY_CHARS, check_query
from vaultd.vaultpath import vault_path

if TYPE_CHECKING:
    from vaultd.config import Config

INSTRUCTIONS = (
    "Tools over the user's Obsidian vault, kept indexed by the vaultd daemon. Use `search` to "
    "find passages (each hit has a note path and a 1-based line range), `read_note` to read a "
    "whole note or just those lines (`outline` gives each section's lines), `links` to follow "
    "a note's links and backlinks, `related` for the notes most related to a note by meaning "
    "and words (linked or not), `unlinked_mentions` for notes naming it without a link, and "
    "`tags` and `recent_notes` to find one's way in. Ask `search` for `snippets` to get short "
    "passages with the matched terms marked **like this**. A note is named by its path "
    "('Plugins/Canvas.md') or, as in Obsidian, by its name ('Canvas')."
)
#: Added to the instructions when no daemon answers as the bridge starts.
NO_DAEMON = (
    " No vaultd daemon is running: answers come from the index as last written; start "
    "`vaultd run` to keep it fresh."
)
#: What fixes a bridge with no vault to serve.
SET_UP = (
    "run `vaultd init ~/Notes` (your vault's folder) to write a config, or add "
    '"--vault", "/path/to/your/vault" to this server\'s args in the MCP client\'s settings; '
    "then restart the MCP server"
)
NO_VAULT = f"vaultd has no vault to serve (no config file names one, and no --vault): {SET_UP}"

#: What a search hit tells the assistant (the chunk id and score parts are vaultd's business);
#: "text" or, when snippets are asked for, "snippet".
#: How a tool's `path` argument is described: a path, or a name as Obsidian resolves it.
NOTE_FIELD = (
    "The note: its path in the vault ('Plugins/Canvas.md') or its name as in Obsidian "
    "('Canvas', 'canvas.md', 'Plugins/Canvas'; among notes of one name, the one nearest the "
    "vault's root)."
)
HIT_FIELDS = ("path", "title", "section", "start_line", "end_line", "score", "tags")


def _tool_error(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


class Answers(Protocol):
    """Where the tools' requests go: the socket API's requests, answered as its client does
    (an error answer raises DaemonError; anything else wrong, another VaultdError)."""

    def request(self, method: str, target: str, body: Any = None) -> Any: ...


class Unconfigured:
    """No vault to serve: every request answers with what is wrong and how to fix it."""

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def request(self, method: str, target: str, body: Any = None) -> Any:
        raise _tool_error(self.problem)


class FromIndex:
    """The daemon's answers without a daemon: its routes (`vaultd.api.server.Api`) over the
    index opened read-only for each request, one at a time."""

    def __init__(self, config: Config) -> None:
        self.config = config
        # open_index takes the data directory's lock: two calls at once would refuse each other.
        self._one_at_a_time = threading.Lock()

    def request(self, method: str, target: str, body: Any = None) -> Any:
        # Here, not at the top: only a bridge without a daemon loads the model and the store.
        from vaultd.api.server import Api
        from vaultd.daemon.serving import DaemonService
        from vaultd.daemon.state import State
        from vaultd.errors import ApiError
        from vaultd.index.open import open_index

        payload = b"" if body is None else json.dumps(body).encode()
        with self._one_at_a_time, open_index(self.config, create=False) as index:
            api = Api(DaemonService(index, State(), lambda: None, dict))
            try:
                _, answer = api.handle(method, target, payload)
            except ApiError as exc:
                raise DaemonError(exc.status, exc.code, exc.message) from None
        return answer


class DaemonOrIndex:
    """The vault's daemon while one answers; the index itself when none does (never started,
    or gone since), looking for a daemon again at every request."""

    def __init__(
        self,
        locate: Callable[[], Client | None],
        index: FromIndex | None,
        fix: str,
    ) -> None:
        self._locate = locate
        self._index = index
        self._fix = fix
        self.client: Client | None = None

    def find(self) -> Client | None:
        """The daemon answering now, if one does (raises VaultdError for one that cannot)."""
        self.client = self._locate()
        return self.client

    def request(self, method: str, target: str, body: Any = None) -> Any:
        client = self.client or self._locate()
        if client is not None:
            try:
                answer = client.request(method, target, body)
            except DaemonError:
                raise
            except VaultdError as exc:
                if client.reachable():
                    raise _tool_error(
                        f"the vaultd daemon on {client.path} is running but did not answer "
                        f"this request ({exc})"
                    ) from exc
                self.client = None  # gone: the index answers until a daemon is back
                if self._index is None:
                    raise _tool_error(
                        f"the vaultd daemon stopped answering on {client.path} ({exc}); {self._fix}"
                    ) from exc
            else:
                self.client = client
                return answer
        if self._index is None:
            raise _tool_error(f"no vaultd daemon answers; {self._fix}")
        return self._index.request(method, target, body)


class Bridge:
    """The tools' logic: requests to the daemon, answers as plain data."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers

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
            return self.answers.request(method, target, body)
        except VaultdError as exc:
            # What the daemon refused and what kept it from answering read the same: the
            # message, which says what to do.
            raise _tool_error(str(exc)) from exc

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
            "path": note["path"],  # the note the name means
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
        return {"path": found["path"], "related": found["related"]}

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
            "path": note["path"],
            "title": note.get("title", ""),
            "links": note.get("links", []),
            "backlinks": note.get("backlinks", []),
        }


def build_server(answers: Answers, instructions: str = INSTRUCTIONS) -> Any:
    """The MCP server with vaultd's tools, their requests answered by `answers`."""
    from mcp.server.mcpserver import MCPServer

    bridge = Bridge(answers)
    server = MCPServer(
        name="vaultd", instructions=instructions, version=__version__, log_level="WARNING"
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
        path: Annotated[str, Field(description=NOTE_FIELD)],
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
        path: Annotated[str, Field(description=NOTE_FIELD)],
    ) -> dict[str, Any]:
        """A note's outgoing links (wiki-links and embeds) and the notes that link to it."""
        return bridge.links(path)

    @server.tool()
    def related(
        path: Annotated[str, Field(description=NOTE_FIELD)],
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
        path: Annotated[str, Field(description=NOTE_FIELD)],
        k: Annotated[int, Field(ge=1, le=500, description="At most this many.")] = 50,
    ) -> dict[str, Any]:
        """Passages of other notes that name this note (its title, file name or an alias)
        without linking to it: links waiting to be made. Each has its note path, line range
        and the line with the name marked **like this**."""
        return bridge.mentions(path, k)

    @server.tool()
    def outline(
        path: Annotated[str, Field(description=NOTE_FIELD)],
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


def serve(config_file: Path | None, vault: Path | None, socket_file: Path | None) -> None:
    """Serve MCP on stdin/stdout until EOF, whatever state vaultd is in (see the module)."""
    import anyio

    answers, instructions = _answers(config_file, vault, socket_file)
    anyio.run(_serve_stdio, build_server(answers, instructions))


def _answers(
    config_file: Path | None, vault: Path | None, socket_file: Path | None
) -> tuple[Answers, str]:
    """Where this bridge's requests go, and the instructions that say so."""
    from vaultd.api.locate import find_daemon
    from vaultd.config import LogSection, load_config
    from vaultd.layout import vault_id
    from vaultd.logs import configure

    try:
        config = load_config(config_file, vault=vault, env=os.environ)
        configure(config.log)
    except ConfigError as exc:
        configure(LogSection())  # stderr: stdout belongs to the protocol
        problem = f"vaultd's configuration cannot be used: {exc}. Fix it, or {SET_UP}"
        return Unconfigured(problem), f"{INSTRUCTIONS} vaultd is not set up yet: {problem}."
    if config.vault.path is None and socket_file is None:
        return Unconfigured(NO_VAULT), f"{INSTRUCTIONS} vaultd is not set up yet: {NO_VAULT}."
    locate: Callable[[], Client | None]
    if socket_file is not None:
        # Named outright: that daemon, checked against the vault when one is configured.
        expected = vault_id(config.require_vault()) if config.vault.path is not None else None
        named = Client(socket_file, vault_id=expected)
        locate = lambda: named if named.health() is not None else None  # noqa: E731
    else:
        locate = lambda: find_daemon(  # noqa: E731
            config.server.socket, config.require_vault(), config.require_store(), os.environ
        )
    if config.vault.path is None:
        index, fix = None, f"start it (`vaultd run`) or {SET_UP}"
    else:
        index, fix = FromIndex(config), "start it with `vaultd run`"
    answers = DaemonOrIndex(locate, index, fix)
    try:
        found = answers.find()
    except VaultdError as exc:
        # A daemon that is there but cannot answer (stopped, another vault's, not the user's):
        # each call looks again, and says this while it lasts.
        return answers, f"{INSTRUCTIONS} vaultd cannot answer now: {exc}."
    return answers, INSTRUCTIONS + (NO_DAEMON if found is None else "")


def tool_summaries() -> list[tuple[str, str]]:
    """Each tool's name and the first sentence of its description, as the server lists them."""
    server = build_server(Unconfigured(NO_VAULT))
    summaries = []
    for tool in server._tool_manager.list_tools():
        # A sentence ends where the next begins with a capital: "e.g. a" goes on.
        whole = " ".join((tool.description or "").split())
        first = re.split(r"\.\s+(?=[A-Z])", whole)[0].rstrip(".")
        summaries.append((tool.name, first))
    return summaries


def format_tools(formatter: click.HelpFormatter) -> None:
    """`vaultd mcp --help`'s list of tools, from the tools the server declares (so the two
    cannot drift apart)."""
    with formatter.section("Tools"):
        formatter.write_dl(tool_summaries())


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
