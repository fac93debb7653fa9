"""Each changed note read, parsed and chunked for the keyword phase's write, or why it could
not be: in this process, or a group at a time in the parser pool's worker processes.

`Preparer.reading` is the file the pass waits on now, and since when: `status` names it, so a
file that is slow to read is seen while it is read, not only once it is left out.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import structlog

from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import LeftOutError, NoteError
from vaultd.faults import Faults
from vaultd.index.detection import Reader, sha256_file
from vaultd.index.outcomes import Failed, failure
from vaultd.index.parsers import ParserPool, parse_and_chunk
from vaultd.index.passes import PassSettings, Read
from vaultd.pipeline.chunk import chunk_id
from vaultd.records import (
    Change,
    Chunk,
    FileState,
    NoteFailed,
    NoteLeftOut,
    Parsed,
    Prepared,
    StoredChunk,
)
from vaultd.storage.embeddings import VectorsController
from vaultd.storage.notes import NotesController
from vaultd.storage.quarantine import FailuresController

log = structlog.get_logger(__name__)

#: Notes marked in flight in one commit when a pool parses (in process, one at a time).
MARK_GROUP = 32


@dataclass(slots=True)
class _Loaded:
    """A note's bytes as read for parsing, with the stat they were read under; or why they
    could not be read."""

    change: Change
    data: bytes = b""
    state: FileState | None = None
    sha256: str = ""
    failure: Failed | None = None

    @property
    def job(self) -> tuple[str, bytes] | None:
        return None if self.failure is not None else (self.change.path, self.data)


class Preparer:
    def __init__(
        self,
        *,
        reader: Reader,
        notes: NotesController,
        vectors: VectorsController,
        failures: FailuresController,
        counter: TokenCounter,
        model_id: str,
        settings: PassSettings,
        faults: Faults,
    ) -> None:
        self.reader = reader
        #: A note's chunks as recorded (what its write replaces; a move's, kept).
        self.notes = notes
        #: The vectors a moved note's chunks keep.
        self.vectors = vectors
        #: Each note is marked in hand before it is read (see `FailuresController.hold`).
        self.failures = failures
        self.counter = counter
        self.model_id = model_id
        self.settings = settings
        self.faults = faults
        #: The file whose note the pass waits for (with a pool, the oldest handed to the
        #: workers and not back yet) and the `time.time()` it began waiting; None between
        #: notes. One tuple, set whole: status reads it from another thread.
        self.reading: tuple[str, float] | None = None

    def all(
        self,
        content: Sequence[Change],
        marked: list[str],
        pool: ParserPool | None,
        read: dict[str, Read],
        ahead: set[str],
    ) -> Iterator[tuple[Change, Prepared | Failed]]:
        """Each change with its note parsed and chunked, or why it could not be; in order.

        With a pool, notes are marked in flight a group at a time, read and handed to the
        workers ahead of the one whose result comes next; `ahead` gets the path of each note
        read (the caller takes them out as it writes them).
        """
        if pool is None:
            for change in content:
                self.failures.hold([change])
                marked.append(change.path)
                self.reading = (change.path, time.time())
                try:
                    outcome = self.one(change, read.pop(change.path, None))
                finally:
                    self.reading = None
                yield change, outcome
            return

        handed: deque[str] = deque()

        def loaded() -> Iterator[_Loaded]:
            for start in range(0, len(content), MARK_GROUP):
                group = content[start : start + MARK_GROUP]
                self.failures.hold(group)
                marked.extend(c.path for c in group)
                for change in group:
                    ahead.add(change.path)
                    handed.append(change.path)
                    if self.reading is None:
                        self.reading = (change.path, time.time())
                    yield self._load(change, read.pop(change.path, None))

        try:
            for item, parsed in pool.parse_all(loaded(), lambda item: item.job):
                handed.popleft()
                self.reading = (handed[0], time.time()) if handed else None
                yield item.change, self._parsed(item, parsed)
        finally:
            self.reading = None

    def one(self, change: Change, read: Read | None = None) -> Prepared | Failed:
        """The note of `change` read (unless given), parsed and chunked in this process."""
        item = self._load(change, read)
        if item.failure is not None:
            return item.failure
        parsed = parse_and_chunk(
            change.path,
            item.data,
            self.counter,
            max_bytes=self.settings.max_bytes,
            max_tokens=self.settings.max_tokens,
            extraction=self.settings.extraction,
        )
        return self._parsed(item, parsed)

    def _load(self, change: Change, read: Read | None = None) -> _Loaded:
        """The note's bytes for parsing, with the stat they were read under and their hash
        (`read`: as read since the scan, which a write since then leaves older than the file,
        so that the next pass reads it again)."""
        state = change.state
        sha256 = change.sha256
        if read is not None and not self.reader.unchanged_since(read[1]):
            read = None
        try:
            data, read_under = read or self.reader.read(change.path)
            sha256 = sha256_file(data)
            self.faults.before_parse(data)
        except LeftOutError as exc:
            return _Loaded(change, failure=NoteLeftOut(state, sha256, exc.kind, exc.reason))
        except NoteError as exc:
            return _Loaded(change, failure=NoteFailed(state, sha256, str(exc)))
        return _Loaded(change, data, read_under, sha256)

    def _parsed(self, item: _Loaded, parsed: Parsed | None) -> Prepared | Failed:
        """What the parser made of a note read for it: its chunks to write, or a failure."""
        change = item.change
        if item.failure is not None:
            return item.failure
        assert parsed is not None, "a note read is parsed"
        if parsed.reason or parsed.note is None:
            if parsed.trace:
                log.error("the parser failed on a note", path=change.path, trace=parsed.trace)
            return failure(change.state, item.sha256, parsed.reason, parsed.kind)
        note, chunks = parsed.note, list(parsed.chunks)
        assert item.state is not None, "a note read has the stat it was read under"
        sha256 = item.sha256
        if (item.state, sha256) != (change.state, change.sha256):
            # Written since it was hashed (perhaps with the same bytes): record what was read
            # now with the stat it was read under. The scan's is older than what a pass in
            # between may have recorded, and would cost a read on every later start.
            # New content at a moved note's path is no plain move, but still a move away from
            # the old path, whose chunks must go.
            kind = "created" if change.kind == "moved" and sha256 != change.sha256 else change.kind
            change = Change.of(kind, item.state, sha256, change.old_path)
        moved_ids: list[str] = []
        vectors: dict[str, np.ndarray] = {}
        if change.kind == "moved" and change.old_path:
            old = self.notes.chunks_of(change.old_path)
            moved_ids = [c.chunk.id for c in old]
            vectors = self.vectors.get(self.model_id, {c.chunk.hash for c in old})
            chunks = _rekeyed(old, vectors, note.path) or chunks
        elif change.old_path:  # a move whose content changed on the way
            moved_ids = self.notes.chunk_ids(change.old_path)
        old_ids = self.notes.chunk_ids(change.path)
        return Prepared(change, note, chunks, old_ids, moved_ids, vectors)


def _rekeyed(old: list[StoredChunk], vectors: Container[str], new_path: str) -> list[Chunk] | None:
    """A moved note keeps its chunks and vectors; only ids and note metadata change.

    Re-chunking could differ when the title comes from the file name (the prefix, and so
    the budget, changes), and a move must cost no embedding. The new title reaches the
    metadata and keyword index now, and the vectors when the note's content next changes.
    """
    if not old or any(c.chunk.hash not in vectors for c in old):
        return None
    return [replace(c.chunk, id=chunk_id(new_path, c.chunk.index)) for c in old]
