"""What `vaultd status` reports, typed and built in one place.

`IndexStatus` is what any reader of an open index can say (the CLI without a daemon, the
daemon, doctor); `DaemonStatus` adds what only a running daemon knows. Their fields are the
keys of the JSON the socket API serves (`GET /v1/status`): pydantic serializes and describes
them as they are (vaultd.api.operations.StatusResponse), and `as_json` is that JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from vaultd.storage.quarantine import LeftOut, Quarantined

if TYPE_CHECKING:
    from vaultd.index.open import Index


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
class Store:
    """The data directory and the Chroma directory or server."""

    data_dir: str
    #: The Chroma directory, or the server's URL.
    chroma: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IndexStatus:
    """What any reader of an open index can say; its fields are the status answer's keys."""

    vault: str
    notes: Annotated[int, Field(description="Notes searchable (by their words at least).")]
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


def index_status(index: Index) -> IndexStatus:
    # Only here: the records above are the API's answers, which light clients (`vaultd status`
    # through a daemon) read without loading the model.
    from vaultd.index.detection import NOT_INDEXED_META
    from vaultd.index.models import LANGUAGES_META, languages_of

    manifest = index.manifest
    counts = manifest.counts(index.embedder.model_id)
    return IndexStatus(
        vault=str(index.vault),
        notes=counts["notes"],
        chunks=counts["chunks"],
        embedded=counts["embedded"],
        awaiting=counts["awaiting"],
        found=index.indexer.found,
        failed=tuple(Failure(p, r, a) for p, r, a in manifest.failed()),
        quarantined=tuple(manifest.quarantined()),
        left_out=tuple(manifest.left_out()),
        in_part=tuple(Skipped(path, reason) for path, reason in manifest.in_part()),
        model=index.embedder.model_id,
        store=Store(str(index.data_dir), index.store.location),
        languages=languages_of(manifest.get_meta(LANGUAGES_META)),
        kinds=dict(sorted(manifest.kind_counts().items())),
        not_indexed=dict(sorted(not_indexed(manifest.get_meta(NOT_INDEXED_META)).items())),
    )


def not_indexed(recorded: str | None) -> dict[str, int]:
    """The counts recorded under NOT_INDEXED_META (none before a full walk)."""
    try:
        value = json.loads(recorded) if recorded else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}


def kinds_text(report: dict[str, Any]) -> list[str]:
    """`vaultd status`'s lines on the kinds of file: those indexed beside notes, by status,
    and the files of kinds not indexed (none when the vault holds only notes)."""
    kinds: dict[str, dict[str, int]] = report.get("kinds") or {}
    lines = []
    for kind, counts in sorted(kinds.items()):
        if kind == "note":
            continue
        parts = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(counts.items()))
        lines.append(f"  {kind}: {parts}")
    skipped = report.get("not_indexed") or {}
    if skipped:
        listed = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.items()))
        lines.append(f"  not indexed (by kind): {listed}")
    return ["kinds:", *lines] if lines else []


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
    #: Bulk work (a full pass) holds back while other programs keep the machine busy; edits
    #: are still served meanwhile.
    yielding: bool
    #: The same, as `vaultd status` reads it.
    waiting_for_busy_machine: bool
    busy_since: float | None
    others_share: float | None


@dataclass(frozen=True, slots=True)
class IdentityCheck:
    """What a path the daemon depends on names now, against what it named when the daemon
    took it on: the vault root, or `vaultd.db`. Identities are (device, inode)."""

    #: "ok", or what is wrong: "missing", "unreachable", "symlink", "not_directory",
    #: "unmounted" or "replaced" (the vault root); "missing", "replaced" or "unreachable"
    #: (vaultd.db).
    state: str
    #: What is wrong and what the daemon does about it, for people (None when ok).
    reason: str | None
    expected: tuple[int, int] | None
    found: tuple[int, int] | None
    checked_at: float

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "expected": _file_id(self.expected),
            "found": _file_id(self.found),
            "checked_at": self.checked_at,
        }


def _file_id(identity: tuple[int, int] | None) -> dict[str, int] | None:
    return None if identity is None else {"device": identity[0], "inode": identity[1]}


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
