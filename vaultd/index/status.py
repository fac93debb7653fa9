"""What `vaultd status` reports, typed and built in one place.

`IndexStatus` is what any reader of an open index can say (the CLI without a daemon, the
daemon, doctor); `DaemonStatus` adds what only a running daemon knows. Both turn into the JSON
the socket API serves (`GET /v1/status`, described by vaultd.api.openapi) with `as_json`, the
one place that names its keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vaultd.index.detection import NOT_INDEXED_META
from vaultd.index.models import LANGUAGES_META, languages_of
from vaultd.progress import Snapshot
from vaultd.storage.quarantine import LeftOut, Quarantined

if TYPE_CHECKING:
    from vaultd.index.open import Index


@dataclass(frozen=True, slots=True)
class Failure:
    """A note whose last attempt failed, with the reason and the attempts on this content."""

    path: str
    reason: str
    attempts: int

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason, "attempts": self.attempts}


@dataclass(frozen=True, slots=True)
class IndexStatus:
    vault: str
    #: Searchable notes: by their words at once, by their meaning once `embedded`.
    notes: int
    chunks: int
    failed: tuple[Failure, ...]
    #: Set aside until their content changes or they are asked for by name.
    quarantined: tuple[Quarantined, ...]
    #: Files that are no notes vaultd can index: reported, not failures.
    left_out: tuple[LeftOut, ...]
    model: str
    data_dir: str
    #: The Chroma directory, or the server's URL.
    chroma: str
    #: What the vault is written in, as last measured (`vaultd.pipeline.languages`), if known.
    languages: dict[str, object] | None = None
    #: Notes with every chunk's vector, and chunks awaiting theirs (the embedding phase).
    embedded: int = 0
    awaiting: int = 0
    #: Note files found in the vault by the last full walk (None before one in this process).
    found: int | None = None
    #: Files recorded, by kind (`records.NoteKind`) and status: {"pdf": {"ok": 9, ...}}.
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Files of kinds not indexed (turned off in `[attachments]`, or no kind vaultd reads:
    #: "other"), by kind, as the last full walk counted them: nothing goes unmentioned.
    not_indexed: dict[str, int] = field(default_factory=dict)
    #: Notes indexed in part, as (path, reason): what of each was not indexed, and why.
    in_part: tuple[tuple[str, str], ...] = ()

    @property
    def troubled(self) -> bool:
        """Whether notes failed or are quarantined: `vaultd status` exits 1."""
        return bool(self.failed or self.quarantined)

    def as_json(self) -> dict[str, Any]:
        return {
            "vault": self.vault,
            "notes": self.notes,
            "chunks": self.chunks,
            **({"found": self.found} if self.found is not None else {}),
            "embedded": self.embedded,
            "awaiting": self.awaiting,
            "failed": [f.as_json() for f in self.failed],
            "quarantined": [q.as_json() for q in self.quarantined],
            "left_out": [e.as_json() for e in self.left_out],
            "in_part": [{"path": path, "reason": reason} for path, reason in self.in_part],
            "kinds": {kind: dict(counts) for kind, counts in sorted(self.kinds.items())},
            "not_indexed": dict(sorted(self.not_indexed.items())),
            "model": self.model,
            "store": {"data_dir": self.data_dir, "chroma": self.chroma},
            **({"languages": self.languages} if self.languages is not None else {}),
        }


def index_status(index: Index) -> IndexStatus:
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
        in_part=tuple(manifest.in_part()),
        model=index.embedder.model_id,
        data_dir=str(index.data_dir),
        chroma=index.store.location,
        languages=languages_of(manifest.get_meta(LANGUAGES_META)),
        kinds=manifest.kind_counts(),
        not_indexed=not_indexed(manifest.get_meta(NOT_INDEXED_META)),
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

    def as_json(self) -> dict[str, Any]:
        return {"p50": self.p50, "p95": self.p95, "samples": self.samples}


@dataclass(frozen=True, slots=True)
class GovernorStatus:
    cpu_budget: float
    yield_above: float
    #: Bulk work (a full pass) holds back while other programs keep the machine busy; edits
    #: are still served meanwhile.
    yielding: bool
    busy_since: float | None
    others_share: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "cpu_budget": self.cpu_budget,
            "yield_above": self.yield_above,
            "yielding": self.yielding,
            "waiting_for_busy_machine": self.yielding,
            "busy_since": self.busy_since,
            "others_share": self.others_share,
        }


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
class DaemonStatus:
    index: IndexStatus
    version: str
    #: "starting", "ok" or "degraded", and why it is not ok.
    health: str
    reasons: dict[str, str]
    indexing: str
    last_reconcile: dict[str, Any] | None
    last_reconcile_at: float | None
    lag: Lag
    queue_depth: int
    governor: GovernorStatus
    progress: Snapshot | None
    watch_mode: str
    watch_fallback_reason: str | None
    embedded_total: int
    notes_read_total: int
    #: The last time the store was found damaged at start-up: problem, moved_to, at.
    moved_aside: dict[str, Any] | None
    #: False once closed for being unused ([schedule] unload) until the next use.
    store_loaded: bool
    model_loaded: bool
    rss_mb: float | None
    #: The last checks of the vault root and vaultd.db, by "vault_root" and "manifest".
    identity: dict[str, IdentityCheck] = field(default_factory=dict)
    #: Files and folders the rules leave out that a user would want to hear about (a name
    #: that is not UTF-8, a link out of the vault...), as (path, reason): the last full walk's,
    #: and those the watcher has met since.
    skipped: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict[str, Any]:
        body = self.index.as_json()
        body["store"] = {
            **body["store"],
            "moved_aside": self.moved_aside,
            "loaded": self.store_loaded,
        }
        return {
            "status": self.health,
            "reasons": dict(self.reasons),
            "indexing": self.indexing,
            "last_reconcile": self.last_reconcile,
            "last_reconcile_at": self.last_reconcile_at,
            "lag_seconds": self.lag.as_json(),
            "version": self.version,
            **body,
            "queue_depth": self.queue_depth,
            "governor": self.governor.as_json(),
            "progress": None if self.progress is None else self.progress.as_json(),
            "watch": {"mode": self.watch_mode, "fallback_reason": self.watch_fallback_reason},
            "embedded_total": self.embedded_total,
            "notes_read_total": self.notes_read_total,
            "model_loaded": self.model_loaded,
            "rss_mb": self.rss_mb,
            "identity": {part: check.as_json() for part, check in self.identity.items()},
            "skipped": [{"path": path, "reason": reason} for path, reason in self.skipped],
        }
