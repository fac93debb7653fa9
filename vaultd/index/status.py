"""What `vaultd status` reports, built in one place: `IndexStatus` (vaultd.answers) from an
open index, and the lines of `vaultd status` on the kinds of file.

`IndexStatus` is what any reader of an open index can say (the CLI without a daemon, the
daemon, doctor); the daemon adds what only it knows (`DaemonStatus`), with the checks of the
paths it depends on (`IdentityCheck`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vaultd.answers import Failure, IndexStatus, Reading, Skipped, Store

if TYPE_CHECKING:
    from vaultd.index.open import Index


def index_status(index: Index) -> IndexStatus:
    # Only here: `vaultd status` through a daemon imports this module for `kinds_text`, without
    # the index.
    from vaultd.index.detection import NOT_INDEXED_META
    from vaultd.index.models import LANGUAGES_META, languages_of

    manifest = index.manifest
    # One snapshot of the manifest: a batch recorded between two of these reads would count
    # a note among the notes and among the failed or left out, or in neither.
    with manifest.snapshot():
        counts = manifest.counts(index.embedder.model_id)
        kinds = dict(sorted(manifest.notes.kind_counts().items()))
        return IndexStatus(
            vault=str(index.vault),
            notes=counts["notes"],
            chunks=counts["chunks"],
            embedded=counts["embedded"],
            awaiting=counts["awaiting"],
            found=index.indexer.found,
            failed=tuple(Failure(p, r, a) for p, r, a in manifest.failures.failed()),
            quarantined=tuple(manifest.failures.quarantined()),
            left_out=tuple(manifest.failures.left_out()),
            in_part=tuple(Skipped(path, reason) for path, reason in manifest.failures.in_part()),
            reading=_reading(index.indexer.keyword.preparer.reading),
            model=index.embedder.model_id,
            store=Store(str(index.data_dir), index.store.location),
            languages=languages_of(manifest.get_meta(LANGUAGES_META)),
            by_kind={kind: n["ok"] for kind, n in kinds.items() if n.get("ok")},
            kinds=kinds,
            not_indexed=dict(sorted(not_indexed(manifest.get_meta(NOT_INDEXED_META)).items())),
        )


def _reading(reading: tuple[str, float] | None) -> Reading | None:
    if reading is None:
        return None
    path, since = reading
    return Reading(path, round(max(0.0, time.time() - since), 1))


def not_indexed(recorded: str | None) -> dict[str, int]:
    """The counts recorded under NOT_INDEXED_META (none before a full walk)."""
    try:
        value = json.loads(recorded) if recorded else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}


#: How `vaultd status` names a number of files of each kind: one, many.
KIND_NAMES = {
    "note": ("note", "notes"),
    "pdf": ("PDF", "PDFs"),
    "image": ("image", "images"),
    "code": ("code file", "code files"),
    "canvas": ("canvas", "canvases"),
    "excalidraw": ("drawing", "drawings"),
}


def by_kind_text(by_kind: dict[str, int]) -> str:
    """The files searchable, by kind, notes first: "173 notes, 10 PDFs, 4 code files"."""
    order = [kind for kind in KIND_NAMES if kind in by_kind]
    order += sorted(set(by_kind) - set(KIND_NAMES))
    said = []
    for kind in order:
        one, many = KIND_NAMES.get(kind, (kind, kind))
        said.append(f"{by_kind[kind]} {one if by_kind[kind] == 1 else many}")
    return ", ".join(said) or "no files"


def kinds_text(report: dict[str, Any]) -> list[str]:
    """`vaultd status`'s lines on the kinds of file: those with files not indexed (failed,
    left out...), by status, and the files of kinds not indexed (none when every file was
    indexed)."""
    kinds: dict[str, dict[str, int]] = report.get("kinds") or {}
    lines = []
    for kind, counts in sorted(kinds.items()):
        if set(counts) <= {"ok"}:  # said in the line of files indexed
            continue
        parts = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(counts.items()))
        lines.append(f"  {kind}: {parts}")
    skipped = report.get("not_indexed") or {}
    if skipped:
        listed = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.items()))
        lines.append(f"  not indexed (by kind): {listed}")
    return ["kinds:", *lines] if lines else []


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
