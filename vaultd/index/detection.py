"""Discovery and detection: what a pass must read, and the candidates hashed.

Work is spent only on what changed: stat first, hash second. A stat is trusted only as
`pipeline/detect.py` says (not within a timestamp tick of its hash), and a full pass may ask
for a share of the vault to be hashed whatever its stat says. A file that is no note vaultd
can index (over `max_file_mb`, binary, not UTF-8 text, unreadable) is recorded as left out,
not failed: logged once per path and kind, listed, never quarantined, and retried on every
pass; it leaves the list when it is fixed or deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from vaultd.errors import LeftOutError, NoteUnavailableError
from vaultd.index.outcomes import Outcomes, Summary
from vaultd.index.passes import Hashed, Pauses, Progress, Read, Scanned
from vaultd.pipeline.detect import classify, keep_unreadable, scan
from vaultd.pipeline.discover import Discovery, file_state
from vaultd.progress import text_weight
from vaultd.records import FileState, KnownNote, NoteLeftOut, Scan
from vaultd.storage.manifest import Manifest
from vaultd.storage.vectors import VectorStore

#: Bytes of notes kept from the hashing for the parser in one pass (more are read again).
KEEP_READ_BYTES = 64 << 20
#: The manifest's meta key for the last full walk's count of files of kinds not indexed.
NOT_INDEXED_META = "not_indexed"


def sha256_file(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Reader:
    """Reads a note's bytes with the stat they were read under, for the hashing and for the
    parser; counts the reads."""

    def __init__(self, root: Path, discovery: Discovery) -> None:
        self.root = root
        self.discovery = discovery
        #: Note files read since start (to hash or to parse); status and benchmarks report it.
        self.reads = 0

    def read(self, path: str) -> Read:
        """The note's bytes, with the stat its file had just before they were read.

        A write after that stat leaves the recorded mtime older than the file's, so a later
        pass reads the note again; a stat taken after the read would let it miss that write.
        The clock is read before both: a write in the same timestamp tick as the read then
        looks racy to `detect.trusted`, never older than the hash.
        """
        self.reads += 1
        hashed_ns = time.time_ns()
        try:
            # Never through a symlink swapped in since the walk (see Discovery.open_note).
            data, st = self.discovery.read_note(path)
        except NoteUnavailableError as exc:
            if exc.kind == "too_big":
                # Grown past the cap since the walk: not read at all.
                raise LeftOutError(path, f"{exc.reason}; skipped", "too_big") from exc
            raise LeftOutError(path, f"cannot read ({exc.reason})", "unreadable") from exc
        except OSError as exc:
            raise LeftOutError(path, f"cannot read ({exc.strerror or exc})", "unreadable") from exc
        return data, file_state(path, st, hashed_ns)

    def unchanged_since(self, state: FileState) -> bool:
        """Whether the note's file still has this stat (ctime and inode too: a write whose
        mtime was put back changes them): then bytes read under it are what it holds. Anything
        else (a save, a swap for a symlink, a path that needs `locate`) is read again, safely.
        A write within the read's timestamp tick is not seen here; the stat recorded with these
        bytes is then racy, and the write's own event, or the next pass, reads the note again."""
        try:
            st = os.stat(
                self.root / state.path, follow_symlinks=self.discovery.rules.follow_symlinks
            )
        except (OSError, ValueError):
            return False
        now = file_state(state.path, st)
        return (now.size, now.mtime_ns, now.ctime_ns, now.inode) == (
            state.size,
            state.mtime_ns,
            state.ctime_ns,
            state.inode,
        )


class Detection:
    def __init__(
        self,
        *,
        discovery: Discovery,
        reader: Reader,
        manifest: Manifest,
        store: VectorStore,
        outcomes: Outcomes,
        pauses: Pauses,
    ) -> None:
        self.discovery = discovery
        self.reader = reader
        #: The unit of work, not one of its controllers: a full walk's count of the files of
        #: kinds not indexed goes to its meta.
        self.manifest = manifest
        self.store = store
        self.outcomes = outcomes
        self.pauses = pauses
        #: The note files the last full walk found (None before one), kept current by the
        #: passes since: status reports how many.
        self.found: set[str] | None = None

    def scan(
        self,
        known: Mapping[str, KnownNote],
        walk: Iterable[FileState],
        *,
        full: bool,
        verify: Container[str],
    ) -> Scanned:
        """Compare the walk with the manifest; record the notes the walk left out for their
        size. The notes in `verify` are read whatever their stat says. Also returns the notes
        that leave `found` once the pass has forgotten them (`forgotten`)."""
        self.discovery.left_out = {}
        walked: list[str] = []

        def recorded() -> Iterator[FileState]:
            for state in walk:
                walked.append(state.path)
                yield state

        result = scan(known, recorded(), verify=verify)
        # A pass over some paths finds and misses notes too: a note created, moved or shrunk
        # under the size cap since the full walk counts, as the next full walk would count
        # it (else more notes are indexed than found). The notes found count from now, before
        # they are indexed; those gone only once the pass has forgotten them: status reads
        # the notes indexed first, and a pass under way never reads as more indexed than found.
        went = set(result.gone)
        if full:
            went |= (self.found or set()) - set(walked)
            self.found = {*(self.found or ()), *walked, *result.gone}
            self.manifest.set_meta(NOT_INDEXED_META, json.dumps(self.discovery.unindexed))
        elif self.found is not None:
            self.found.update(walked)
        # Only now, after the walk, does the discovery know which folders it could not read,
        # and which notes it left out for their size (copied: a fresh edit served at a pause
        # point runs a pass of its own).
        unreadable = [path for path, _ in self.discovery.unreadable if path.endswith("/")]
        too_big = dict(self.discovery.left_out)
        gone = [p for p in keep_unreadable(result.gone, unreadable) if p not in too_big]
        result = replace(result, gone=gone)
        summary = Summary(
            notes_seen=result.seen,
            notes_unchanged=result.unchanged,
            notes_checked=result.distrusted,
            skipped=[{"path": p, "reason": r} for p, r in self.discovery.skipped],
        )
        summary.add(self._too_big(too_big, known))
        return Scanned(result, frozenset(went), summary)

    def forgotten(self, went: Iterable[str]) -> None:
        """The pass has forgotten the notes it found gone (`scan`): they leave `found`."""
        if self.found is not None:
            self.found.difference_update(went)

    def _too_big(
        self, too_big: Mapping[str, tuple[FileState, str]], known: Mapping[str, KnownNote]
    ) -> Summary:
        """Record the notes the walk left out for their size. Not notes under the rules, they
        lose what was indexed of them, as a note newly excluded does."""
        if not too_big:
            return Summary()
        chunks = {p: self.manifest.notes.chunk_ids(p) for p in sorted(too_big) if p in known}
        indexed = [p for p, ids in chunks.items() if ids]
        if indexed:
            self.store.delete([i for p in indexed for i in chunks[p]])
        return self.outcomes.record_failures(
            [NoteLeftOut(state, "", "too_big", reason) for state, reason in too_big.values()],
            deleted=indexed,
        )

    def hash(self, result: Scan, known: Mapping[str, KnownNote], report: Progress) -> Hashed:
        """Hash the candidates and classify them: the changes, each note's share of the work
        for progress, and the bytes hashed, kept up to a bound for the parser (a first index
        reads each note once, not twice)."""
        hashed: list[tuple[FileState, str]] = []
        unreadable: list[NoteLeftOut] = []
        weights: dict[str, int] = {}
        contents = {k.sha256 for k in known.values() if k.ok}
        kept: dict[str, Read] = {}
        room = KEEP_READ_BYTES
        for done, state in enumerate(result.candidates, 1):
            try:
                data, read_under = self.reader.read(state.path)
                sha256 = sha256_file(data)
                # The walk's stat can be older than these bytes: keep the one they were read under.
                hashed.append((read_under, sha256))
                if len(data) <= room:
                    kept[state.path] = (data, read_under)
                    room -= len(data)
                weights[state.path] = text_weight(data, copy=sha256 in contents)
                contents.add(sha256)
            except LeftOutError as exc:
                unreadable.append(NoteLeftOut(state, "", exc.kind, exc.reason))
            report("hash", done, len(result.candidates))
            self.pauses(frozenset(), throttle=True)
        changes = classify(known, hashed, result.gone)
        return Hashed(changes, weights, kept, self.outcomes.record_failures(unreadable))
