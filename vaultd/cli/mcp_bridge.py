"""`vaultd mcp`: a stdio MCP server for AI tools, answering from the vault's daemon or index.

With a daemon running, every tool call is one request to it (the same API as `vaultd search`),
so the bridge starts in well under a second and never takes the data directory's lock. It
never reads the vault itself: the daemon reads a note for `read_note`, and only a note it has
indexed and its rules still admit, so ignore rules (a private folder left out of the index)
hold for the assistant too.

With no daemon (never started, or stopped mid-session) the same requests are answered over
the index opened read-only for the call, as `vaultd search` does (vaultd.cli.common.DaemonOrIndex).

An MCP client shows the user nothing of a server's stderr, and a server that exits shows only
"Connection closed". So whatever is wrong (no vault configured, a config that does not load,
no index yet) the bridge still starts and answers each tool call with an error saying what is
wrong and the command that fixes it, and says so in `initialize`'s instructions.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import click
from pydantic import ConfigDict

from vaultd import __version__
from vaultd.api.client import Client
from vaultd.api.limits import MAX_BODY
from vaultd.api.operations import (
    BY_NAME,
    NoteReadRequest,
    NoteRequest,
    Operation,
    Request,
    checked,
    deprecated_aliases,
)
from vaultd.cli.common import DaemonOrIndex
from vaultd.cli.mcp_exclude import Screen
from vaultd.errors import (
    EXIT_FAILURE,
    ConfigError,
    NoteNotIndexedError,
    NoteUnavailableError,
    QueryError,
    VaultdError,
)
from vaultd.hints import suggest
from vaultd.index.exclusion import Exclusion
from vaultd.storage.lock import Holder

INSTRUCTIONS = (
    "Tools over the user's Obsidian vault, kept indexed by the vaultd daemon. Use `search` to "
    "find passages (each hit has a note path and a 1-based line range), `read_note` to read a "
    "whole note or just those lines (`outline` gives each section's lines), `links` to follow "
    "a note's links and backlinks (`backlinks` for the passages that link to it), `related` "
    "for the notes most related to a note by meaning and words (linked or not), "
    "`unlinked_mentions` for notes naming it without a link, and `tags` and `recent_notes` to "
    "find one's way in. Ask `search` for `snippets` to get short passages instead of whole "
    "ones. Each hit's `highlights` are the [start, end) ranges (in code points) of the matched "
    "words in its snippet or text, which is the note's own: a `**bold**` in it is the note's "
    "markup, not a match. A hit in source code names its symbol and the package its file is "
    "in; write package:NAME in a query to search one package only. A note is named by its "
    "path ('Plugins/Canvas.md') or, as in Obsidian, by its name ('Canvas')."
)
# The messages below suggest commands with the bridge's own --config and --vault (vaultd.hints):
# built when said, after the command line was read.


def no_daemon() -> str:
    """Added to the instructions when no daemon answers as the bridge starts."""
    return (
        " No vaultd daemon is running: answers come from the index as last written; start "
        f"{suggest('run')} to keep it fresh."
    )


def set_up() -> str:
    """What fixes a bridge with no vault to serve."""
    return (
        f"run {suggest('init', '~/Notes')} (your vault's folder) to write a config, or add "
        '"--vault", "/path/to/your/vault" to this server\'s args in the MCP client\'s settings; '
        "then restart the MCP server"
    )


def no_vault() -> str:
    return f"vaultd has no vault to serve (no config file names one, and no --vault): {set_up()}"


#: What of a search hit is vaultd's business, not the assistant's.
HIT_INTERNALS = ("id", "indexed")


def _tool_error(message: str) -> Exception:
    from mcp.server.mcpserver.exceptions import ToolError

    return ToolError(message)


def unconfigured(problem: str) -> DaemonOrIndex:
    """No vault to serve: every call answers with what is wrong and how to fix it."""

    def refuse() -> None:
        raise VaultdError(problem)

    return DaemonOrIndex(refuse, None)


# -- the tools: each an operation of vaultd.api.operations -----------------------------------------


def _hits(answer: dict[str, Any]) -> dict[str, Any]:
    hits = [
        {k: v for k, v in hit.items() if v is not None and k not in HIT_INTERNALS}
        for hit in answer["hits"]
    ]
    # What the search did to the query, and a wait it could not do, so the assistant can say so.
    said = {
        k: answer[k]
        for k in ("corrections", "showing", "did_you_mean", "short", "not_waited")
        if answer.get(k)
    }
    return {"hits": hits, **said}


def _lines(answer: dict[str, Any]) -> dict[str, Any]:
    keep: tuple[str, ...] = ("path", "title", "start_line", "end_line", "total_lines", "text")
    if answer.get("blocks") is not None:  # a canvas's cards with their groups, say
        keep = (*keep, "blocks")
    # A PDF is read by pages: its page range and count instead of lines.
    pages = ("start_page", "end_page", "total_pages")
    if answer.get("total_pages") is not None:
        keep = ("path", "title", *pages, "text")
    return {k: answer.get(k, "") for k in keep}


def _links(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: answer.get(k, "") for k in ("path", "title", "links", "backlinks")}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """An MCP tool: the operation it asks, under the tool's own name. Its input schema is the
    operation's request model's, less the fields the tool sets itself (`fixed`) or does not
    offer (`hidden`); its description is the operation's docstring unless the tool shows a part
    of the answer (`shape`) and says so."""

    name: str
    operation: str
    fixed: Mapping[str, Any] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    description: str | None = None

    @property
    def op(self) -> Operation:
        return BY_NAME[self.operation]

    @property
    def text(self) -> str:
        """The tool's description: its own, else its operation's docstring."""
        return self.description or self.op.doc

    def schema(self) -> dict[str, Any]:
        schema = self.op.request.model_json_schema()
        left_out = set(self.fixed) | set(self.hidden)
        if left_out:
            schema["properties"] = {
                k: v for k, v in schema["properties"].items() if k not in left_out
            }
            if "required" in schema:
                schema["required"] = [k for k in schema["required"] if k not in left_out]
        return schema


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("search", "search", shape=_hits),
    ToolSpec(
        "read_note",
        "note",
        fixed={"text": True},
        shape=_lines,
        description="Read a note, or the lines start_line..end_line of it (e.g. a search hit's "
        "range), as it is on disk now; a PDF by pages, start_page..end_page (a hit's page "
        "and page_end); a canvas, a drawing or an image as the text indexed from it.",
    ),
    ToolSpec(
        "links",
        "note",
        hidden=("text", "start_line", "end_line", "start_page", "end_page"),
        shape=_links,
        description="A note's outgoing links (wiki-links and embeds), each with the vault path "
        "it resolves to, and the notes that link to it.",
    ),
    ToolSpec("related", "related"),
    ToolSpec("unlinked_mentions", "mentions"),
    ToolSpec("backlinks", "backlinks"),
    ToolSpec("outline", "outline"),
    ToolSpec("tags", "tags"),
    ToolSpec("recent_notes", "recent"),
)


def _arguments(model: type[Request], given: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as sent, a list or an object sent as a JSON string (as some clients do)
    read as what it holds."""
    out = dict(given)
    for name, value in given.items():
        info = model.model_fields.get(name)
        if info is None or not isinstance(value, str) or info.annotation is str:
            continue
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):
            continue
        if isinstance(parsed, list | dict):
            out[name] = parsed
    return out


class Bridge:
    """The tools' logic: each call checked by its operation's request model (the daemon's
    words for what is wrong), asked of `answers`, and answered as plain data."""

    def __init__(self, answers: DaemonOrIndex, exclusion: Exclusion | None = None) -> None:
        self.answers = answers
        #: `[mcp] exclude`: applied here, to every tool's request and answer.
        self.exclusion = exclusion
        #: Calls running in their threads, those left there when cancelled among them.
        self.running = 0
        self._counting = threading.Lock()

    def run_counted(self, tool: ToolSpec, given: Mapping[str, Any]) -> dict[str, Any]:
        """`run`, counted in `running` while it runs."""
        with self._counting:
            self.running += 1
        try:
            return self.run(tool, given)
        finally:
            with self._counting:
                self.running -= 1

    def run(self, tool: ToolSpec, given: Mapping[str, Any]) -> dict[str, Any]:
        model = tool.op.request
        # And the old spellings the API still takes this release (`modified_since`).
        offered = {*model.model_fields, *deprecated_aliases(model)} - {*tool.fixed, *tool.hidden}
        problems = [f"unknown field {name!r}" for name in given if name not in offered]
        request: Request | None = None
        if not problems:
            try:
                request = checked(model, {**_arguments(model, given), **tool.fixed})
            except QueryError as exc:
                problems.append(str(exc))
        size = len(json.dumps(dict(given)).encode())
        if size > MAX_BODY:
            # The daemon cuts a body over its limit while it arrives, and the broken send
            # would read as a daemon gone: say what is too big before sending any of it.
            problems.append(
                f"the request is {size} bytes; the daemon takes at most {MAX_BODY} bytes "
                "(fewer or shorter tags, or a shorter query)"
            )
        if problems or request is None:
            raise _tool_error("; ".join(problems))
        screen = Screen(self.exclusion, self._note_of) if self.exclusion is not None else None
        try:
            if screen is not None and isinstance(request, NoteRequest):
                self._admit(screen, request.path)
            answer = self.answers.call(tool.operation, request)
        except VaultdError as exc:
            # What the daemon refused and what kept it from answering read the same: the
            # message, which says what to do.
            raise _tool_error(str(exc)) from exc
        found = answer.model_dump(mode="json", exclude_unset=True)
        if screen is not None:
            found = screen.answer(tool.operation, found)
        return tool.shape(found) if tool.shape is not None else found

    def _note_of(self, path: str) -> tuple[list[str], str] | None:
        """An indexed note's tags and kind, None when it cannot be told."""
        try:
            note = self.answers.call("note", checked(NoteReadRequest, {"path": path}))
        except VaultdError:
            return None
        return list(note.tags), str(note.kind)

    def _admit(self, screen: Screen, name: str) -> None:
        """Raises as for a note not indexed when the note `name` means is kept from AI tools
        (its text, links and neighbours are never asked for)."""
        try:
            note = self.answers.call("note", checked(NoteReadRequest, {"path": name}))
        except NoteUnavailableError:
            return  # no such note: the call itself says so
        if screen.excluded(note.path, note.tags, note.kind):
            raise NoteNotIndexedError(name)


def _tool(bridge: Bridge, spec: ToolSpec) -> Any:
    from mcp.server.mcpserver.tools.base import Tool
    from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
    from mcp_types import ToolAnnotations

    class Arguments(ArgModelBase):
        """The arguments handed on whole: the request model checks them (`Bridge.run`)."""

        model_config = ConfigDict(extra="allow")

        def model_dump_one_level(self) -> dict[str, Any]:
            return {"arguments": dict(self.model_extra or {})}

    async def run(arguments: dict[str, Any]) -> dict[str, Any]:
        import anyio.to_thread

        # Left to its thread when cancelled (by the client, or given up at exit): a socket read
        # or a query cannot be interrupted, and waiting for it would hold the bridge open.
        return await anyio.to_thread.run_sync(
            partial(bridge.run_counted, spec, arguments), abandon_on_cancel=True
        )

    return Tool(
        fn=run,
        name=spec.name,
        title=None,
        description=spec.text,
        parameters=spec.schema(),
        fn_metadata=FuncMetadata(arg_model=Arguments, output_model=dict[str, Any]),
        is_async=True,
        context_kwarg=None,
        annotations=ToolAnnotations(read_only_hint=spec.op.read_only),
    )


def build_server(bridge: Bridge, instructions: str = INSTRUCTIONS) -> Any:
    """The MCP server with vaultd's tools (`TOOLS`), their calls answered by `bridge`."""
    from mcp.server.mcpserver import MCPServer

    return MCPServer(
        name="vaultd",
        instructions=instructions,
        version=__version__,
        log_level="WARNING",
        tools=[_tool(bridge, spec) for spec in TOOLS],
    )


def serve(config_file: Path | None, vault: Path | None, socket_file: Path | None) -> None:
    """Serve MCP on stdin/stdout until EOF and the answers to what was asked before it,
    whatever state vaultd is in (see the module)."""
    import anyio

    answers, instructions, exclusion = _answers(config_file, vault, socket_file)
    from vaultd.cli.mcp_stdio import serve_stdio

    bridge = Bridge(answers, exclusion)
    given_up = anyio.run(serve_stdio, build_server(bridge, instructions))
    if given_up or bridge.running:
        # A call given up, or cancelled by the client, may still run in its thread, which the
        # interpreter would wait for at exit: every answer is written by now.
        sys.stderr.flush()
        os._exit(EXIT_FAILURE if given_up else 0)


def _answers(
    config_file: Path | None, vault: Path | None, socket_file: Path | None
) -> tuple[DaemonOrIndex, str, Exclusion | None]:
    """Where this bridge's requests go, the instructions that say so, and what of the vault
    the answers leave out (`[mcp] exclude`)."""
    from vaultd.config import LogSection, load_config
    from vaultd.layout import vault_id
    from vaultd.logs import configure

    try:
        config = load_config(config_file, vault=vault, env=os.environ)
        configure(config.log)
    except ConfigError as exc:
        configure(LogSection())  # stderr: stdout belongs to the protocol
        problem = f"vaultd's configuration cannot be used: {exc}. Fix it, or {set_up()}"
        return unconfigured(problem), f"{INSTRUCTIONS} vaultd is not set up yet: {problem}.", None
    if config.vault.path is None and socket_file is None:
        return (
            unconfigured(no_vault()),
            f"{INSTRUCTIONS} vaultd is not set up yet: {no_vault()}.",
            None,
        )
    exclusion = Exclusion.of(config.mcp.exclude)
    if socket_file is None:
        answers = DaemonOrIndex.of(config, Holder.MCP)
    else:
        # Named outright: that daemon, checked against the vault when one is configured.
        configured = config.vault.path is not None
        vault = config.require_vault() if configured else None
        named = Client(
            socket_file, vault_id=vault_id(vault) if vault is not None else None, vault=vault
        )
        answers = DaemonOrIndex(
            lambda: named if named.health() is not None else None,
            config if configured else None,
            f"start it ({suggest('run')}) or {set_up()}",
            Holder.MCP,
        )
    try:
        found = answers.find()
    except VaultdError as exc:
        # A daemon that is there but cannot answer (stopped, another vault's, not the user's):
        # each call looks again, and says this while it lasts.
        return answers, f"{INSTRUCTIONS} vaultd cannot answer now: {exc}.", exclusion
    return answers, INSTRUCTIONS + (no_daemon() if found is None else ""), exclusion


def format_tools(formatter: click.HelpFormatter) -> None:
    """`vaultd mcp --help`'s list of tools: each one's name and the first sentence of its
    description, from `TOOLS` as the server declares them (so the two cannot drift apart)."""
    summaries = []
    for spec in TOOLS:
        # A sentence ends where the next begins with a capital: "e.g. a" goes on.
        first = re.split(r"\.\s+(?=[A-Z])", " ".join(spec.text.split()))[0].rstrip(".")
        summaries.append((spec.name, first))
    with formatter.section("Tools"):
        formatter.write_dl(summaries)
