"""The small frozen records the API's answers are made of: a search's hits and what it did to
the query (`Hit`, `Correction`, `SearchResult`), a note's heading, an unlinked mention, a
related note with the pair of passages that ties it, and what `vaultd status` reports
(`IndexStatus`, `DaemonStatus` and their parts).

The index and the store make them; vaultd.api.operations declares its responses with them,
and pydantic serializes and describes them as they are (a record whose fields are described
by the docstrings under them sets `__pydantic_config__ = DESCRIBED`). They live below both,
beside vaultd.records, so that a client that only talks to a daemon (`vaultd status`, `vaultd
search`, `vaultd --help`) reads the API's declarations without loading the index, the store,
the pipeline or numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from vaultd.errors import LeftOutKind
from vaultd.records import DESCRIBED, NOWHERE, Location, NoteKind

# -- a note's parts ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str
    #: The heading's own line, and the last line of its section (before the next heading of
    #: the same or a higher level, or the note's end).
    start_line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class Mention:
    __pydantic_config__ = DESCRIBED
    path: str
    title: str
    #: The passage holding the mention (its line range in the note).
    start_line: int
    end_line: int
    text: str
    """The line, the name **marked**."""
    name: str
    """The title or alias found."""


@dataclass(frozen=True, slots=True)
class Passage:
    start_line: int
    end_line: int
    section: str
    text: str


@dataclass(frozen=True, slots=True)
class RelatedNote:
    """A note related to the one asked about."""

    __pydantic_config__ = DESCRIBED
    path: str
    title: str
    score: float
    """What ranks it, higher is nearer: the fused score as a share of the best, or the one
    way's own."""
    similarity: float
    """The cosine of the pair of passages that ties them."""
    linked: bool
    """Whether the two notes are linked already (either way)."""
    #: The pair of passages that ties them: this note's (`source`) and the related one's.
    source: Passage
    target: Passage


# -- a search's answer ---------------------------------------------------------------------------

#: The known-item tiers a hit may rank in, best first (vaultd.index.known).
KnownTier = Literal[
    "name",
    "definition",
    "phrase",
    "stemmed phrase",
    "corrected phrase",
    "proximity",
    "rare word",
]
#: Why a page of search hits holds fewer than k: `exhausted`, the index holds no more passages
#: that pass the filters (and, in keyword mode, match) under the cap per note; `depth`, the
#: search went as deep as it goes (vaultd.index.search.MAX_DEPTH passages) and the cap per
#: note still left fewer.
Short = Literal["exhausted", "depth"]
Line = Annotated[int, Field(ge=1)]
#: A [start, end) range of a text, in Unicode code points.
Range = Annotated[tuple[Annotated[int, Field(ge=0)], ...], Field(min_length=2, max_length=2)]
#: The names of a location's fields, which a hit sends beside its own.
_LOCATION = tuple(f.name for f in fields(Location))


@dataclass(frozen=True, slots=True, kw_only=True)
class Hit:
    """One search result: a passage of a note with its 1-based line range."""

    # The API sends a hit as it is, and a client reads it back so (vaultd.api.operations,
    # SearchResponse), but for its location: its fields stand beside the hit's own, as clients
    # have always read them (`_sent`, `_received`).
    __pydantic_config__ = ConfigDict(extra="forbid", serialize_by_alias=True)
    path: str
    title: str
    section: str
    start_line: Line
    end_line: Line
    score: float
    text: Annotated[str, Field(description="The passage (absent with snippets).")] = ""
    snippet: Annotated[
        str | None,
        Field(description="With snippets: a short part of the passage, as it is (no markup)."),
    ] = None
    highlights: Annotated[
        tuple[Range, ...],
        Field(
            description="Where the query's matched words are in `snippet` (with snippets) or "
            "`text`: [start, end) ranges, sorted and apart, counted in Unicode code points (a "
            "Python string's indexes; JavaScript counts UTF-16 units, where a character above "
            "U+FFFF is two). The text itself is the note's, unmarked: its own `**bold**` is "
            "never a match."
        ),
    ] = field(default_factory=tuple)
    tags: tuple[str, ...]
    id: str
    indexed: Annotated[
        bool,
        Field(
            description="False while the note awaits its vectors (the first index): found by "
            "its words only, so far."
        ),
    ]
    kind: Annotated[NoteKind, Field(description="What kind of file the passage is from.")]
    location: Location = NOWHERE
    package: Annotated[
        str | None,
        Field(
            description="A source passage's package, named by the nearest manifest above its "
            "file (absent where none names one)."
        ),
    ] = None
    ranked_by: Annotated[
        KnownTier | None,
        Field(
            description="The known-item tier that placed the hit above the hits ranked by score "
            '(docs/search.md, "Known items"); absent when its score placed it. Within a tier '
            "the score orders the hits."
        ),
    ] = None
    #: How the score was made, which the search's later steps read too (the tier, the merged
    #: passages); the API sends them only when asked for (`explain`).
    parts: Annotated[
        Mapping[str, Any],
        Field(
            alias="explain",
            description="Score parts: keyword (rank, BM25 score), vector (rank, cosine "
            "similarity), fusion (each retriever's RRF contribution, k, total), note (what the "
            "note adds in hybrid search), phrase (exact match and its tier), merged (the chunk "
            "ids of a merged hit).",
        ),
    ] = field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _sent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The hit as the API sends it: its location's fields beside its own, the text left
        out when a snippet stands for it, and what it lacks (None, no score parts) left out."""
        sent: dict[str, Any] = {}
        for name, value in handler(self).items():
            if name == "location":
                sent.update((k, v) for k, v in value.items() if v is not None)
            elif name == "text" and self.snippet is not None:
                continue  # the line range still says where the passage is
            elif value is not None and not (name == "explain" and not value):
                sent[name] = value
        return sent

    @model_validator(mode="before")
    @classmethod
    def _received(cls, data: Any) -> Any:
        """A hit as sent (`_sent`), its location's fields gathered into its location."""
        if isinstance(data, Mapping) and "location" not in data:
            where = {k: data[k] for k in _LOCATION if k in data}
            data = {k: v for k, v in data.items() if k not in _LOCATION} | {"location": where}
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The hit's schema as sent (`_sent`): its location's fields among its own."""
        described = handler(schema)
        own = handler.resolve_ref_schema(described)
        if "location" in own.get("properties", {}):
            where = handler.resolve_ref_schema(own["properties"]["location"])["properties"]
            own["properties"] = {
                name: value
                for key, prop in own["properties"].items()
                for name, value in (where.items() if key == "location" else [(key, prop)])
            }
        return described


@dataclass(frozen=True, slots=True)
class Correction:
    """A query word the vault does not hold (or holds far more rarely than a close neighbour),
    also searched as a term of the words index within one or two edits of it."""

    __pydantic_config__ = DESCRIBED
    word: str
    """A query word as typed."""
    term: str
    """The words index's term (a stem) it was also searched as."""
    edits: int
    """Edits between the two (a swap of two letters is one)."""
    shown: str = ""
    """The term as the notes on the page spell it, for "showing results for ..."; empty when
    no passage on the page held it."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A page of hits with what the search did to the query to find them."""

    hits: tuple[Hit, ...]
    #: Every correction applied (each adds matches, never removes any).
    corrections: tuple[Correction, ...] = ()
    #: The query as searched, when a correction decided the first hit; None otherwise.
    showing: str | None = None
    #: The query with its typos corrected, offered when the query as typed was decisive and
    #: searched as typed (no correction applied); None otherwise.
    did_you_mean: str | None = None
    #: Why the page holds fewer than k hits, or None when it holds k (`Short`).
    short: Short | None = None


# -- status --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A note set aside after failing `attempts` times on the same content."""

    __pydantic_config__ = DESCRIBED
    path: str
    reason: str
    attempts: int
    since: float
    """When it was last tried (epoch seconds): the moment it was quarantined."""

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "attempts": self.attempts,
            "since": self.since,
        }


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A file that is no note vaultd can index: over the size cap, binary, not UTF-8 text or
    unreadable. A note that was indexed before keeps its last good chunks (except one over the
    cap, which the rules no longer count as a note)."""

    __pydantic_config__ = DESCRIBED
    path: str
    kind: LeftOutKind
    reason: str
    since: float
    """When it was last found so (epoch seconds)."""

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "reason": self.reason, "since": self.since}


@dataclass(frozen=True, slots=True)
class Failure:
    """A note whose last attempt failed, with the reason and the attempts on this content."""

    path: str
    reason: str
    attempts: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """A path and why: a file left out, or what of a note indexed in part was not."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Reading:
    """The file a pass is reading now: the one it waits on."""

    path: str
    #: Seconds it has been read for so far.
    seconds: float


@dataclass(frozen=True, slots=True)
class Store:
    """The data directory and the Chroma directory or server."""

    data_dir: str
    #: The Chroma directory, or the server's URL.
    chroma: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexStatus:
    """What any reader of an open index can say; its fields are the status answer's keys."""

    vault: str
    notes: Annotated[
        int,
        Field(
            description="Files searchable (by their words at least), of every kind: `by_kind` "
            "says how many of each."
        ),
    ]
    chunks: int
    found: Annotated[
        int | None,
        Field(
            description="Note files found in the vault (by the last full walk; none before one)."
        ),
    ] = None
    embedded: Annotated[int, Field(description="Notes with every chunk's vector.")] = 0
    awaiting: Annotated[int, Field(description="Chunks awaiting vectors.")] = 0
    failed: tuple[Failure, ...]
    quarantined: Annotated[
        tuple[Quarantined, ...],
        Field(description="Set aside until their content changes or they are asked for by name."),
    ]
    left_out: Annotated[
        tuple[LeftOut, ...],
        Field(description="Files that are no notes vaultd can index: reported, not failures."),
    ]
    in_part: Annotated[
        tuple[Skipped, ...],
        Field(
            description="Notes indexed in part: what of each was not (a PDF's pages OCR could "
            "not read, a canvas's unknown cards, a frontmatter ignored), and why."
        ),
    ] = ()
    reading: Annotated[
        Reading | None,
        Field(
            description="The file the pass in hand is reading now (the one it waits on), and "
            "for how long; none between passes."
        ),
    ] = None
    by_kind: Annotated[
        dict[str, int],
        Field(
            description='Files searchable by kind ("note", "pdf", "image", "code", "canvas", '
            '"excalidraw"): `notes` split; a kind with none is absent.'
        ),
    ] = field(default_factory=dict)
    kinds: Annotated[
        dict[str, dict[str, int]], Field(description="Files recorded by kind, then by status.")
    ] = field(default_factory=dict)
    not_indexed: Annotated[
        dict[str, int],
        Field(
            description="Files of kinds not indexed (turned off in [attachments], or no kind "
            'vaultd reads: "other"), by kind, as the last full walk counted them.'
        ),
    ] = field(default_factory=dict)
    model: str
    store: Store
    languages: Annotated[
        dict[str, Any] | None,
        Field(description="What the vault is written in, from a sample of its notes."),
    ] = None

    @property
    def troubled(self) -> bool:
        """Whether notes failed or are quarantined: `vaultd status` exits 1."""
        return bool(self.failed or self.quarantined)

    def as_json(self) -> dict[str, Any]:
        """As the socket API sends it (`GET /v1/status`), with `vaultd status --json`."""
        out: dict[str, Any] = TypeAdapter(type(self)).dump_python(self, mode="json")
        return out


@dataclass(frozen=True, slots=True)
class Lag:
    """Save-to-searchable lag of the recent edits, in seconds (None before the first)."""

    p50: float | None
    p95: float | None
    samples: int


@dataclass(frozen=True, slots=True)
class GovernorStatus:
    cpu_budget: float
    yield_above: float
    #: Bulk work (a full pass) slows down while other programs keep the machine busy, to no
    #: less than `floor` of the time; edits are still served meanwhile.
    yielding: bool
    #: The same, as `vaultd status` reads it.
    waiting_for_busy_machine: bool
    busy_since: float | None
    others_share: float | None
    #: While it yields, bulk work still runs at least this share of the time.
    floor: float


@dataclass(frozen=True, slots=True)
class DaemonStore(Store):
    #: The last time the store was found damaged at start-up: problem, moved_to, at.
    moved_aside: dict[str, Any] | None
    #: False once closed for being unused ([schedule] unload) until the next use.
    loaded: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonStatus(IndexStatus):
    """What a running daemon says of itself and its index: the status answer (`GET
    /v1/status`), as it is."""

    status: Literal["starting", "ok", "degraded"]
    state: Annotated[
        Literal["starting", "indexing", "idle"],
        Field(
            description="What the daemon is doing: `starting` until its first pass begins, "
            "`indexing` while a full pass (the first index, a rescan) is in hand, its phase in "
            "`progress`, `idle` otherwise. `status` stays `starting` until the first pass is "
            "done, though searches are answered meanwhile."
        ),
    ]
    reasons: Annotated[dict[str, str], Field(description="Why the daemon is degraded, by part.")]
    indexing: Annotated[str | None, Field(description="What the worker has in hand.")]
    last_reconcile: dict[str, Any] | None
    last_reconcile_at: float | None
    lag_seconds: Annotated[Lag, Field(description="Save-to-searchable lag of recent edits.")]
    version: str
    store: Annotated[
        DaemonStore,
        Field(
            description="The data directory, the Chroma directory or server, and the store's state."
        ),
    ]
    queue_depth: int
    governor: Annotated[GovernorStatus, Field(description="How bulk work is paced.")]
    restart_pending: Annotated[
        tuple[str, ...],
        Field(
            description="Settings changed in the config file that the daemon applies only when "
            'it restarts, e.g. "search" or "embedding model" (a reload applied the rest).'
        ),
    ] = ()
    progress: Annotated[
        dict[str, Any] | None,
        Field(description="How far the full pass in hand has come, and the time left."),
    ]
    watch: Annotated[
        dict[str, str | None],
        Field(description="How the vault is watched (`mode`), and why it fell back to polling."),
    ]
    embedded_total: int
    notes_read_total: int
    model_loaded: bool
    rss_mb: float | None
    identity: Annotated[
        dict[str, dict[str, Any]],
        Field(
            description="The last checks that the vault root and vaultd.db are unchanged, by "
            '"vault_root" and "manifest".'
        ),
    ] = field(default_factory=dict)
    skipped: Annotated[
        tuple[Skipped, ...],
        Field(
            description="Files and folders left out that a user would want to hear about (a name"
            " that is not UTF-8, a link out of the vault...): the last full walk's, "
            "and those the watcher has met since."
        ),
    ] = ()
    events: Annotated[
        dict[str, int] | None,
        Field(
            description="The event stream (`GET /v1/events`): readers now, and events dropped "
            "since start because a reader read too slowly."
        ),
    ] = None
