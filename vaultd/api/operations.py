"""Every operation of the API, declared once: its route and method, a typed request model and a
typed response model, its caps and defaults, whether it only reads, and one docstring.

The rest follows from this table. The socket server validates each request by its model and
serializes each answer by its model; `/openapi.json` is generated from it (vaultd.api.openapi);
the MCP tools and the CLI take their fields, bounds and help from it; the `Service` protocol
(vaultd.api.service) is typed by its models, and its local implementation (vaultd.api.local)
answers the CLI without a daemon with the code the daemon serves from.

Pydantic v2 models: a well-kept library whose JSON Schema the MCP SDK already speaks, so the
document, the tools and the validation are one description. A request model refuses any field
it does not declare (`extra="forbid"`): `{"query": "canvas", "limit": 2}` is a 400 naming
`limit`, never a silent default. A request's docstring is the operation's OpenAPI summary (its
first line) and description, its MCP tool's description and its CLI command's help.

Renamed fields keep their old spelling as a second validation alias for one release
(`modified_since` for `since`, `tag` for `tags`): `deprecated_aliases` lists them for the
document, which marks them deprecated.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar, get_origin

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    RootModel,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from vaultd.answers import Correction, DaemonStatus, Heading, Hit, Mention, RelatedNote, Short
from vaultd.api.limits import MAX_TAGS, MAX_WAIT
from vaultd.errors import QueryError, VaultdError
from vaultd.query import (
    MAX_CONDITIONS,
    MAX_IN_VALUES,
    MAX_K,
    MAX_LIST,
    MAX_PACKAGES,
    MAX_PER_NOTE,
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    Filters,
    How,
    Mode,
    SearchQuery,
    check_query,
    parse_since,
    parse_where,
)
from vaultd.records import NOTE_KINDS, NoteKind
from vaultd.vaultpath import vault_path


def _refusal(message: object, field: str | None = None) -> PydanticCustomError:
    # The message as the rule words it, never "Value error, ...": the API, the CLI and MCP
    # refuse the same input with the same words. `field`: the field it begins with, if any.
    if field is None and isinstance(message, QueryError):
        field = message.field
    return PydanticCustomError("vaultd", "{message}", {"message": str(message), "field": field})


def _rule(check: Callable[[Any], object]) -> AfterValidator:
    """A field checked by the rule the code below applies to it, refused in its words (which
    name the field)."""

    def checked(value: Any) -> Any:
        try:
            check(value)
        except VaultdError as exc:
            raise _refusal(exc) from None
        return value

    return AfterValidator(checked)


def _in_vault(value: str, info: ValidationInfo) -> str:
    """The vault path, normalized; refused, naming the field, when out of the vault."""
    try:
        return vault_path(value)
    except VaultdError as exc:
        raise _refusal(f"{info.field_name}: {exc}", info.field_name) from None


def _in_vault_or_idle(value: str, info: ValidationInfo) -> str:
    """`_in_vault`, or "idle" as it is: the vault as a whole, once nothing is left to index."""
    return value if value == "idle" else _in_vault(value, info)


VaultPath = Annotated[str, Field(min_length=1), AfterValidator(_in_vault)]
#: What a search may wait for: a note, or the whole vault ("idle").
WaitTarget = Annotated[str, Field(min_length=1), AfterValidator(_in_vault_or_idle)]
Since = Annotated[
    str | Annotated[float, Field(ge=0)] | None,
    _rule(lambda value: value is None or parse_since(value)),
    Field(
        validation_alias=AliasChoices("since", "modified_since"),
        description="Only notes changed at or after this ISO date or time (local time when "
        "it has no offset) or epoch seconds.",
    ),
]


# -- the parts of requests -----------------------------------------------------------------------


class Request(BaseModel):
    """A request: every field declared, anything else refused."""

    # Every model here is built when first used: a client that only talks to a daemon builds
    # the one request it sends, not all of them (docs/benchmarks.md, "Start-up of the light
    # clients"); the daemon builds them all before it serves (`build`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class NoteRequest(Request):
    """A request about one note, named by its vault path or as Obsidian takes a name."""

    path: VaultPath = Field(
        description="The note: its vault path, or its name as Obsidian resolves it "
        "(`Canvas` is `Plugins/Canvas.md`); refused when absolute or with a `..` component.",
    )


Count = Annotated[int, Field(ge=1, le=MAX_LIST)]
LineNumber = Annotated[int, Field(ge=1)]
PageNumber = Annotated[int, Field(ge=1)]
Tags = Annotated[list[str], Field(max_length=MAX_TAGS)]


class Filtered(Request):
    """The filters a search and related notes share: every one given must pass. Each is read
    into vaultd.query.Filters, which declares it, by its name."""

    tags: Tags = Field(
        default_factory=list,
        validation_alias=AliasChoices("tags", "tag"),
        description="Only notes with all of these tags; nested tags match their parents.",
    )
    tags_any: Tags = Field(
        default_factory=list,
        validation_alias=AliasChoices("tags_any", "tag_any"),
        description="Only notes with at least one of these tags.",
    )
    path_prefix: str = Field(
        "",
        description="Only notes under this folder, or this one note's path: a vault path "
        "(refused when absolute or with a `..` component).",
    )
    since: Since = None
    kinds: list[NoteKind] = Field(
        default_factory=list,
        max_length=len(NOTE_KINDS),
        description="Only files of these kinds: notes, canvases, PDFs, images (their text), "
        "source code, Excalidraw drawings.",
    )
    packages: list[str] = Field(
        default_factory=list,
        max_length=MAX_PACKAGES,
        description="Only source files of one of these packages, as their nearest manifest "
        "names them (a Cargo.toml [package], a package.json name, a pyproject.toml [project] "
        "name, a go.mod module), in any case. A search may also write `package:NAME` in its "
        "query.",
    )
    exclude_tags: Tags = Field(
        default_factory=list,
        description="No notes with any of these tags; nested tags match their parents. A "
        "search may also write `-tag:TAG` in its query.",
    )
    exclude_paths: list[str] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="No notes under these folders, nor these notes: vault paths (refused when "
        "absolute or with a `..` component). A search may also write `-path:FOLDER` in its "
        "query.",
    )
    _filters: Filters = PrivateAttr(default_factory=Filters)

    @model_validator(mode="after")
    def _checked_filters(self) -> Filtered:
        try:
            # By their names, whichever request declares them (only a search takes `where`).
            self._filters = Filters.of(dict(self))
        except VaultdError as exc:
            raise _refusal(exc) from None
        return self

    @property
    def filters(self) -> Filters:
        """The filters, parsed and checked when the request was."""
        return self._filters


# -- requests ------------------------------------------------------------------------------------


class HealthRequest(Request):
    """Liveness and readiness.

    `ok`, `degraded` (with the reason) or `starting`, and which vault the daemon serves."""


class StatusRequest(Request):
    """Counts, queue, failures, freshness and where things are.

    Everything `vaultd status` shows: notes and chunks searchable, the failed, quarantined and
    left-out files, the model, the store, the pacing of bulk work and the save-to-searchable
    lag."""


_SCALAR: list[dict[str, Any]] = [{"type": t} for t in ("string", "number", "boolean", "null")]
#: One frontmatter condition of `where`, as vaultd.query.parse_where reads it.
_CONDITION: dict[str, Any] = {
    "anyOf": [
        *_SCALAR,
        {
            "type": "object",
            "minProperties": 1,
            "properties": {
                "$eq": {"anyOf": _SCALAR},
                "$in": {"type": "array", "items": {"anyOf": _SCALAR}, "maxItems": MAX_IN_VALUES},
                **{op: {"type": ["number", "string"]} for op in ("$gt", "$gte", "$lt", "$lte")},
            },
            "additionalProperties": False,
        },
    ]
}


class SearchRequest(Filtered):
    """Search the vault's notes by words and by meaning.

    Hybrid search fuses the keyword (BM25) and vector rankings; `keyword` and `vector` use one.
    Filters narrow the notes before ranking: tags, a folder, frontmatter conditions (`where`),
    a modification time (`since`), kinds of file and packages (`package:NAME` in the query
    too); `exclude_tags` and `exclude_paths` (`-tag:TAG`, `-path:FOLDER` in the query too)
    leave notes out."""

    query: Annotated[str, _rule(check_query)] = Field(
        # Checked by vaultd.query.check_query, whose words every way in shares; stated here.
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": r"\S"},
        description=f"Not empty or only whitespace; at most {MAX_QUERY_CHARS} characters and "
        f"{MAX_QUERY_TERMS} keyword terms (distinct words other than stop words, quoted "
        "phrases, pairs of characters of text in scripts written without spaces); anything "
        "else is refused.",
    )
    k: int = Field(10, ge=1, le=MAX_K, description="How many hits.")
    mode: Mode = Field("hybrid", description="Words and meaning fused, or one of them.")
    where: Annotated[dict[str, Any], _rule(parse_where)] | None = Field(
        None,
        max_length=MAX_CONDITIONS,
        json_schema_extra={"additionalProperties": _CONDITION},
        description="Frontmatter conditions, all of which must hold: a plain value means "
        'equality (strings case-insensitive); an object holds operators: "$eq", "$in" (a '
        'list), "$gt", "$gte", "$lt", "$lte" (a number or an ISO date). A list-valued field '
        'passes when any item does. Example: {"status": "done", "year": {"$gte": 2020}}.',
    )
    per_note: int | None = Field(
        None,
        ge=0,
        le=MAX_PER_NOTE,
        description="At most this many hits from one note (0: no cap); default: [search] per_note.",
    )
    merge: bool | None = Field(
        None,
        description="Merge neighbouring passages of one note into one hit; default: [search] "
        "merge.",
    )
    snippets: bool = Field(
        False,
        description="Give each hit a short snippet instead of its whole text: the passage's "
        "text as it is, cut around its matches (with … where text is left out), its "
        "`highlights` into the snippet; the line range stays the passage's.",
    )
    explain: bool = Field(False, description="Add each hit's score parts.")
    wait_for: WaitTarget | None = Field(
        None,
        description='A vault path, or "idle": answer once it is indexed (refused when out of '
        "the vault; a timeout when it is not indexed in time). Only a running daemon waits: "
        "with none, nothing indexes, so the index as last written answers at once and says so "
        "(`not_waited`).",
    )
    timeout: float = Field(
        10.0,
        ge=0,
        description=f"How long to wait for `wait_for`, in seconds; at most {MAX_WAIT:g} are "
        "waited (ask again for longer).",
    )

    @property
    def asked(self) -> SearchQuery:
        """The search as the index runs it (vaultd.index.search)."""
        return SearchQuery(
            self.query,
            k=self.k,
            mode=self.mode,
            filters=self.filters,
            per_note=self.per_note,
            merge=self.merge,
            snippets=self.snippets,
        )


class NoteReadRequest(NoteRequest):
    """One indexed note with its links, backlinks and chunks.

    With `text`, also the note's text as it is on disk now (or the lines asked for; a PDF's
    text layer, or the pages asked for, with its count of pages; a canvas's, a drawing's or an
    image's text as extracted, with its blocks), read as the indexer reads it."""

    text: bool = Field(False, description="Add the note's text as it is on disk now.")
    start_line: LineNumber | None = Field(None, description="With text: from this line.")
    end_line: LineNumber | None = Field(None, description="With text: to this line.")
    start_page: PageNumber | None = Field(
        None, description="With text, of a PDF: from this page (a hit's `page`)."
    )
    end_page: PageNumber | None = Field(
        None, description="With text, of a PDF: to this page (a hit's `page_end`)."
    )


class RelatedRequest(NoteRequest, Filtered):
    """The notes nearest this one by meaning, from the stored vectors.

    Each comes with its score, whether the two are linked already, and the pair of passages
    that ties them. Not ready (ask again soon) while the note awaits its vectors."""

    k: int = Field(10, ge=1, le=MAX_K, description="How many related notes.")
    how: How = Field("fused", description="How nearness is measured.")
    exclude_linked: bool = Field(False, description="Leave out notes linked either way.")
    start_line: LineNumber | None = Field(None, description="Only the passages from this line.")
    end_line: LineNumber | None = Field(None, description="Only the passages to this line.")

    @property
    def lines(self) -> tuple[int, int] | None:
        """The line range asked for, open ends filled in."""
        if self.start_line is None and self.end_line is None:
            return None
        return (self.start_line or 1, self.end_line or 1 << 31)


class MentionsRequest(NoteRequest):
    """Unlinked mentions: passages naming this note without a link.

    A note is named by its title, file name or an alias, as a whole phrase; notes linking to it
    already are left out."""

    k: Count = Field(50, description="At most this many mentions.")


class BacklinksRequest(NoteRequest):
    """The notes linking to this one, each with the passages that hold the links.

    A link counts when it resolves to the note as Obsidian resolves it. The note with the most
    links comes first, then by path; each passage is the indexed chunk holding a link's line."""

    k: Count = Field(50, description="At most this many linking notes.")


class OutlineRequest(NoteRequest):
    """The note's headings, each with its section's line range.

    Read from the note as it is on disk now."""


class TagsRequest(Request):
    """Every tag with how many notes hold it, most used first.

    A nested tag's notes count for its parents too."""

    prefix: str = Field("", description="Only this tag and those below it.")


class RecentRequest(Request):
    """The notes modified most recently, newest first."""

    k: Count = Field(20, description="How many notes.")
    since: Since = None

    @property
    def since_ns(self) -> int | None:
        return None if self.since is None else parse_since(self.since)


class EventsRequest(Request):
    """What the daemon does, as it happens (server-sent events).

    A stream of `text/event-stream` events: a note indexed, failed or deleted, a phase of a pass
    begun or moved on, a pass done, and a `ping` on a quiet stream. Each reader has a bounded
    buffer: one that reads too slowly loses its oldest events (each event counts them in
    `dropped`) and never holds the daemon up. `curl -N --unix-socket SOCKET
    http://vaultd/v1/events` follows it."""


class ReindexRequest(Request):
    """Queue notes, or the whole vault, for a fresh comparison.

    Every note named (every note, without paths) is read and hashed, whatever its size and
    times say. A quarantined note named in paths gets one more try."""

    paths: Annotated[list[VaultPath], AfterValidator(lambda p: list(dict.fromkeys(p)))] = Field(
        default_factory=list, description="Vault paths; none: the whole vault."
    )


class ExportRequest(Request):
    """Every chunk record in the store, sorted by id, as JSON lines."""

    vectors: bool = Field(False, description="Add each record's vector.")


class OpenapiRequest(Request):
    """This document: the API's OpenAPI description, generated from its declarations."""


# -- the parts of answers ------------------------------------------------------------------------


class Response(BaseModel):
    """An answer: exactly the keys declared. Optional keys left unset are not sent."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class LinkingPassage(Response):
    start_line: int = Field(ge=1)
    end_line: int = Field(ge=1)
    section: str
    text: str
    link_lines: list[int] = Field(description="The lines in it that hold a link to the note.")


class Backlink(Response):
    path: str
    title: str
    links: int = Field(ge=1, description="How many of its links point to the note.")
    passages: list[LinkingPassage] = Field(
        description="The passages holding the links (none for a link in front matter)."
    )


class TagCount(Response):
    tag: str
    notes: int


class RecentNote(Response):
    path: str
    title: str
    modified: str = Field(description="UTC, ISO 8601.")
    tags: list[str]


class NoteChunk(Response):
    id: str
    index: int
    section: str
    headings: list[str]
    start_line: int
    end_line: int
    tokens: int
    text: str
    page: int | None = Field(None, ge=1)
    page_end: int | None = Field(None, ge=1)
    node: str | None = None
    symbol: str | None = None


class ReadBlock(Response):
    """Where a passage of a canvas, a drawing or an image is in the text read of it."""

    start_line: int
    end_line: int
    node: str | None = Field(None, description="Its canvas card's (or drawing element's) id.")
    headings: list[str] = Field(description="The labels of the canvas groups holding it.")


Loose = dict[str, Any]


# -- answers -------------------------------------------------------------------------------------


class ErrorDetail(Response):
    code: str
    message: str
    kind: str | None = Field(
        None,
        description="What exactly is refused, where a client acts on it: a 404 for a note sends "
        "`not_indexed` when no indexed note answers to the name.",
    )
    field: str | None = Field(
        None,
        description="The request field a 400 refuses, where it refuses one: the message begins "
        "with its name (the CLI names the option it was typed as instead).",
    )


class ErrorResponse(Response):
    """Every error answer, whatever the route."""

    error: ErrorDetail


class HealthResponse(Response):
    status: Literal["ok", "degraded", "starting"]
    version: str
    vault: str
    vault_id: str
    pid: int
    data_dir: str
    reason: str | None = Field(None, description="Why it is not ok.")


T = TypeVar("T")


class Whole(RootModel[T], Generic[T]):
    """An answer that is one value, as it is."""

    model_config = ConfigDict(defer_build=True)


class StatusResponse(Whole[DaemonStatus]):
    """vaultd.answers.DaemonStatus, as it is."""


class SearchResponse(Response):
    hits: list[Hit]
    corrections: list[Correction] = Field(
        default_factory=list,
        description="Query words that the vault holds in no form and that are no common "
        "word, also searched within one or two edits (applied: the typed query found nothing "
        "decisive).",
    )
    showing: str | None = Field(
        None, description="The query as searched, when a correction decided the first hit."
    )
    did_you_mean: str | None = Field(
        None,
        description="The query with its likely typos corrected, offered when the query as "
        "typed found a note's name or its words in order and was searched as typed.",
    )
    short: Short | None = Field(
        None,
        description="Why the page holds fewer than k hits (null when it holds k): "
        "`exhausted`, no more passages pass the filters (and, in keyword mode, match) under "
        "the cap per note; `depth`, the search went as deep as it goes and the cap per note "
        "still left fewer.",
    )
    not_waited: Literal["no_daemon"] | None = Field(
        None,
        description="Why `wait_for` was not waited on: `no_daemon`, no daemon is running (the "
        "CLI or MCP answered from the index), so the hits are the index as last written.",
    )


class NoteResponse(Response):
    path: str
    kind: NoteKind
    title: str
    aliases: list[str]
    tags: list[str]
    links: list[Loose]
    backlinks: list[str]
    frontmatter: Loose
    sha256: str
    status: Literal["ok", "failed", "quarantined", "left_out"]
    error: str | None
    package: str | None = Field(
        None, description="A source file's package, named by the nearest manifest above it."
    )
    chunks: list[NoteChunk]
    text: str | None = Field(None, description="With text: the note's lines asked for.")
    start_line: int | None = None
    end_line: int | None = None
    total_lines: int | None = None
    start_page: int | None = Field(None, description="With text of a PDF: its first page.")
    end_page: int | None = Field(None, description="With text of a PDF: its last page.")
    total_pages: int | None = Field(None, description="With text of a PDF: its pages.")
    blocks: list[ReadBlock] | None = Field(
        None,
        description="With text of a canvas, a drawing or an image (its text as indexed): "
        "its blocks (a card, an element, a run of lines) in the lines read.",
    )


class RelatedResponse(Response):
    path: str
    related: list[RelatedNote]


class MentionsResponse(Response):
    path: str
    mentions: list[Mention]


class BacklinksResponse(Response):
    path: str
    backlinks: list[Backlink]


class OutlineResponse(Response):
    path: str
    headings: list[Heading]


class TagsResponse(Response):
    tags: list[TagCount]


class RecentResponse(Response):
    notes: list[RecentNote]


class ReindexResponse(Response):
    accepted: bool
    paths: list[str] | Literal["all"]


class ExportRecord(Response):
    """One line of an export."""

    id: str
    document: str
    metadata: Loose
    vector: list[float] | None = None


class OpenapiResponse(Whole[dict[str, Any]]):
    pass


EventKind = Literal[
    "hello", "ping", "note_indexed", "note_failed", "note_deleted", "phase", "pass_done"
]


class Event(Response):
    """One server-sent event of `GET /v1/events`: its `event:` field is `kind`, its `data:`
    field this object as JSON."""

    kind: EventKind = Field(
        description="`hello` on connecting; `ping` on a quiet stream; `note_indexed` (searchable "
        "by its words), `note_failed` (with the reason; also a file left out or quarantined), "
        "`note_deleted`; `phase` when a pass's phase begins or moves on (with its progress); "
        "`pass_done` when a pass ends (with its summary)."
    )
    seq: int = Field(ge=0, description="The event's number since the daemon started (0: none).")
    time: float = Field(description="When it happened, epoch seconds.")
    dropped: int = Field(
        ge=0, description="Events this reader lost so far because it read too slowly."
    )
    path: str | None = Field(None, description="The note, for a note's event.")
    reason: str | None = Field(None, description="Why a note failed or was left out.")
    status: str | None = Field(
        None, description="For `note_failed`: `failed`, `quarantined` or `left_out`."
    )
    progress: Loose | None = Field(
        None, description="For `phase`: the phase, done, total, unit, percent and time left."
    )
    summary: Loose | None = Field(None, description="For `pass_done`: what the pass did.")
    full: bool | None = Field(None, description="For `pass_done`: whether it was a full pass.")
    lag_seconds: float | None = Field(
        None, description="For `pass_done` of an edit: its save-to-searchable lag."
    )


# -- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    method: Literal["GET", "POST"]
    #: The route; `{path}` is the note's vault path, URL-encoded.
    route: str
    request: type[Request]
    response: type[BaseModel]
    #: Error statuses of its own, beyond those any request may meet.
    errors: tuple[int, ...] = ()
    #: Whether it only reads (MCP's readOnlyHint).
    read_only: bool = True
    #: The status of a successful answer.
    status: int = 200
    #: Answered as JSON lines, one `response` each, streamed.
    stream: bool = False
    #: Answered as server-sent events (`text/event-stream`), one `response` each, until the
    #: client goes away.
    sse: bool = False

    @property
    def doc(self) -> str:
        """The operation's one docstring, dedented: OpenAPI, MCP and the CLI's help."""
        return inspect.cleandoc(self.request.__doc__ or "")

    @property
    def summary(self) -> str:
        return self.doc.partition("\n\n")[0].replace("\n", " ")


#: A note's route; `{path}` is its vault path, URL-encoded.
NOTE = "/v1/notes/{path}"
#: A write, queued by the daemon.
_WRITE: dict[str, Any] = {"read_only": False, "status": 202}

OPERATIONS: tuple[Operation, ...] = (
    Operation("health", "GET", "/v1/health", HealthRequest, HealthResponse),
    Operation("status", "GET", "/v1/status", StatusRequest, StatusResponse),
    Operation("search", "POST", "/v1/search", SearchRequest, SearchResponse),
    Operation("related", "GET", f"{NOTE}/related", RelatedRequest, RelatedResponse, (404,)),
    Operation("mentions", "GET", f"{NOTE}/mentions", MentionsRequest, MentionsResponse, (404,)),
    Operation("backlinks", "GET", f"{NOTE}/backlinks", BacklinksRequest, BacklinksResponse, (404,)),
    Operation("outline", "GET", f"{NOTE}/outline", OutlineRequest, OutlineResponse, (404, 422)),
    Operation("note", "GET", NOTE, NoteReadRequest, NoteResponse, (404, 422)),
    Operation("tags", "GET", "/v1/tags", TagsRequest, TagsResponse),
    Operation("recent", "GET", "/v1/recent", RecentRequest, RecentResponse),
    Operation("reindex", "POST", "/v1/reindex", ReindexRequest, ReindexResponse, **_WRITE),
    Operation("export", "GET", "/v1/export", ExportRequest, ExportRecord, stream=True),
    Operation("events", "GET", "/v1/events", EventsRequest, Event, sse=True),
    Operation("openapi", "GET", "/openapi.json", OpenapiRequest, OpenapiResponse),
)

BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}


def build() -> None:
    """Build every model now, as a server does before its first request: no request pays for
    building one."""
    models = [m for m in globals().values() if isinstance(m, type) and issubclass(m, BaseModel)]
    for model in models:
        if model.__module__ == __name__:
            model.model_rebuild()


def deprecated_aliases(model: type[BaseModel]) -> dict[str, str]:
    """Old spellings still taken for one release, each with the field it now names."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            out.update({str(old): name for old in alias.choices[1:]})
    return out


def list_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields (and old spellings) a query string may repeat: those holding a list."""
    lists = {n for n, info in model.model_fields.items() if get_origin(info.annotation) is list}
    return frozenset(
        lists | {old for old, new in deprecated_aliases(model).items() if new in lists}
    )


def bounds(metadata: list[Any]) -> tuple[Any, Any]:
    """The lower and upper bound (`ge`, `le`) of a field's metadata, None where it has none."""
    low = next((m.ge for m in metadata if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in metadata if getattr(m, "le", None) is not None), None)
    return low, high


R = TypeVar("R", bound=BaseModel)


def checked(model: type[R], data: Mapping[str, Any], *, strict: bool = False) -> R:
    """`data` as the request `model`, or QueryError saying what is wrong as the API's 400 says
    it: the server, the CLI and the MCP tools refuse alike."""
    try:
        return model.model_validate(data, strict=strict)
    except ValidationError as exc:
        raise refused(model, exc) from None


def refused(model: type[BaseModel], exc: ValidationError) -> QueryError:
    """What was wrong with a request, as the API's 400 says it; with the field refused, where
    only one is (its message begins with the field's name)."""
    problems = _problems(model, exc)
    field = problems[0][0] if len(problems) == 1 else None
    return QueryError("; ".join(text for _, text in problems), field)


def refusal(model: type[BaseModel], exc: ValidationError) -> str:
    """What was wrong with a request, naming the field, as the API's 400 says it."""
    return str(refused(model, exc))


def _problems(model: type[BaseModel], exc: ValidationError) -> list[tuple[str | None, str]]:
    """Each thing wrong with a request: the field it is about (None for one the model does not
    declare, or none), and what is wrong, beginning with that field's name."""
    problems: list[tuple[str | None, str]] = []
    for error in exc.errors(include_url=False):
        named = str(error["loc"][0]) if error["loc"] else None
        name = named or "the body"
        kind = error["type"]
        field = model.model_fields.get(name)
        low, high = bounds(field.metadata) if field is not None else (None, None)
        if kind == "vaultd":
            problems.append(((error.get("ctx") or {}).get("field"), error["msg"]))
        elif kind == "extra_forbidden" and name in deprecated_aliases(model):
            new = deprecated_aliases(model)[name]
            problems.append((None, f"give {new} or its old name {name}, not both"))
        elif kind == "extra_forbidden":
            near = difflib.get_close_matches(name, list(model.model_fields), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            problems.append((None, f"unknown field {name!r}{hint}"))
        elif kind == "missing":
            problems.append((named, f"{name} is required"))
        elif low is not None and high is not None and kind in _RANGE_ERRORS:
            problems.append((named, f"{name} must be {low} to {high}"))
        else:
            problems.append((named, f"{name}: {error['msg']}"))
    return list(dict.fromkeys(problems))


_RANGE_ERRORS = frozenset(
    {"greater_than_equal", "less_than_equal", "too_long", "too_short", "int_from_float"}
)
