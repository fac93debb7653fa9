"""What a pass made of its notes: the summary it reports, and each note that could not be
indexed recorded, logged and told of."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import structlog

from vaultd.records import FileState, NoteFailed, NoteLeftOut
from vaultd.storage.manifest import Manifest

log = structlog.get_logger(__name__)

#: A note that could not be indexed.
Failed = NoteFailed | NoteLeftOut


def failure(state: FileState, sha256: str, reason: str, kind: str) -> Failed:
    """A failure, or a file left out when there is a `kind` of file it is."""
    return NoteLeftOut(state, sha256, kind, reason) if kind else NoteFailed(state, sha256, reason)


@dataclass(slots=True)
class Summary:
    """What one reconcile did; `vaultd index --json` prints it."""

    notes_seen: int = 0
    notes_unchanged: int = 0
    #: Notes read though their stat was as recorded: too close to their last hash to prove
    #: anything, due a check in a full pass, or named by the user (`verify`).
    notes_checked: int = 0
    notes_touched: int = 0
    notes_changed: int = 0
    notes_moved: int = 0
    notes_deleted: int = 0
    notes_failed: int = 0
    #: Files that are no note vaultd can index (too big, binary, not UTF-8, unreadable).
    notes_left_out: int = 0
    #: Files whose content was read (to hash or to parse); an unchanged vault reads none.
    notes_read: int = 0
    chunks_embedded: int = 0
    #: Chunks published with a vector stored before (unchanged text, a move, a copy).
    chunks_reused: int = 0
    chunks_deleted: int = 0
    store_repaired: int = 0
    seconds: float = 0.0
    #: When the keyword phase ended: every note of the pass searchable by its words.
    keyword_seconds: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    left_out: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def add(self, part: Summary) -> None:
        """Count in another part of the pass: counts and times added, lists extended (in the
        order the parts came)."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(part, f.name)
            if isinstance(mine, list):
                mine.extend(theirs)
            else:
                setattr(self, f.name, mine + theirs)

    def __add__(self, part: Summary) -> Summary:
        whole = Summary()
        whole.add(self)
        whole.add(part)
        return whole

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        out["keyword_seconds"] = round(self.keyword_seconds, 3)
        return out


class Outcomes:
    """Records the notes that failed or were left out, and tells of every note's outcome."""

    def __init__(self, manifest: Manifest, on_note: Callable[..., None] | None = None) -> None:
        self.manifest = manifest
        #: Told of each note indexed, failed or deleted, as `(kind, path=..., ...)`: the
        #: daemon's event stream (vaultd.daemon.events). Must not block.
        self.on_note = on_note

    def tell(self, kind: str, **fields: Any) -> None:
        if self.on_note is not None:
            self.on_note(kind, **fields)

    def record_failures(self, failed: Iterable[Failed], deleted: Sequence[str] = ()) -> Summary:
        """Record, log and tell of these notes; their part of the pass's summary."""
        summary = Summary()
        failed = list(failed)
        if not failed:
            return summary
        # A note failing the same way on every retry is logged once, not on every pass; a file
        # left out for the same kind of reason too, across restarts (the manifest remembers).
        before = self.manifest.notes.records(f.path for f in failed)
        quarantined = self.manifest.apply(failed, deleted=deleted, done=[f.path for f in failed])
        left = [f for f in failed if isinstance(f, NoteLeftOut)]
        for f in left:
            path, kind, reason = f.path, f.kind, f.reason
            was = before.get(path)
            if was is not None and was.known.left_out == kind:
                log.debug("note left out again", path=path, kind=kind, reason=reason)
            else:
                log.warning("note left out", path=path, kind=kind, reason=reason)
            summary.left_out.append({"path": path, "kind": kind, "reason": reason})
            self.tell("note_failed", path=path, reason=reason, status="left_out")
        summary.notes_left_out += len(left)
        rows = [f for f in failed if isinstance(f, NoteFailed)]
        for failure in rows:
            path, reason = failure.path, failure.reason
            row = before[path].row if path in before else None
            if path in quarantined:
                log.error("note quarantined: it keeps failing", path=path, reason=reason)
            elif row is not None and row["status"] == "failed" and row["error"] == reason:
                log.debug("note failed again", path=path, reason=reason)
            else:
                log.warning("note failed", path=path, reason=reason)
            summary.failures.append({"path": path, "reason": reason})
            status = "quarantined" if path in quarantined else "failed"
            self.tell("note_failed", path=path, reason=reason, status=status)
        summary.notes_failed += len(rows)
        return summary
