"""The keyword phase: each new or changed note read, parsed, chunked and committed to the
manifest, and so to the keyword index, at once.

A chunk whose text has a stored vector is published to Chroma with it, the others await the
embedding phase. One bad note is recorded as failed with its reason and never stops the run;
crash suspects go last and one at a time (see `vaultd.storage.quarantine`).
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping, Sequence
from dataclasses import dataclass

from vaultd.index.outcomes import Failed, Outcomes, Summary
from vaultd.index.packages import Packages
from vaultd.index.parsers import ParserPool
from vaultd.index.passes import Pauses, Progress, Read, Written
from vaultd.index.prepare import Preparer
from vaultd.index.store_sync import StoreSync
from vaultd.index.writer import Writer
from vaultd.pipeline.discover import Discovery
from vaultd.records import Change, NoteWritten, Prepared, Record, kind_of
from vaultd.storage.manifest import Manifest
from vaultd.storage.metadata import chunk_metadata, links_within
from vaultd.storage.vectors import VectorStore

#: Notes at most in one batch of the keyword phase (and of touched notes republished).
BATCH_NOTES = 1024
#: The keyword phase commits this many chunks at a time: nothing is embedded there, so a
#: batch is a second or two of parsing, and fewer commits cost less.
KEYWORD_BATCH_CHUNKS = 4096
#: The kinds read in the extraction worker: bulk work of seconds a file (see `apply`).
EXTRACTED_KINDS = frozenset({"pdf", "image"})


@dataclass(slots=True)
class _Tally:
    """The phase's progress in bytes of text (see vaultd.progress): a note is done once its
    batch is written."""

    report: Progress
    weights: Mapping[str, int]
    total: int = 0
    done: int = 0

    def weight(self, change: Change) -> int:
        return self.weights.get(change.path, change.size)

    def advance(self, amount: int) -> None:
        self.done += amount
        self.report("index", self.done, self.total)


class KeywordPhase:
    def __init__(
        self,
        *,
        manifest: Manifest,
        store: VectorStore,
        writer: Writer,
        sync: StoreSync,
        preparer: Preparer,
        packages: Packages,
        discovery: Discovery,
        outcomes: Outcomes,
        pauses: Pauses,
        model_id: str,
    ) -> None:
        #: The unit of work: a batch's notes, chunks, links, tags and failures move in one
        #: commit (`Manifest.apply`).
        self.manifest = manifest
        self.store = store
        #: Writes the records with vectors to the store while the batch is parsed.
        self.writer = writer
        self.sync = sync
        #: Reads, parses and chunks each note.
        self.preparer = preparer
        #: Names the package of each source file written.
        self.packages = packages
        #: A note deleted is forgotten only while it is still gone.
        self.discovery = discovery
        self.outcomes = outcomes
        self.pauses = pauses
        self.model_id = model_id

    def apply(
        self,
        changes: Sequence[Change],
        report: Progress,
        weights: Mapping[str, int] | None = None,
        *,
        pool: ParserPool | None = None,
        read: dict[str, Read] | None = None,
    ) -> Written:
        """Carry out `changes`, committing each note's chunks (their vectors are the embedding
        phase's); return the notes written. `weights` are the notes' shares of the work for
        progress (their sizes where missing); `pool` parses in worker processes; `read` holds
        notes read since the scan (bytes and the stat read under), taken instead of reading
        them again."""
        summary = Summary()
        self._touch(changes, summary)
        self._forget([c.path for c in changes if c.kind == "deleted"], summary)
        content = [c for c in changes if c.kind in ("created", "modified", "moved")]
        # Crash suspects go last: the rest of the vault is indexed first.
        suspects = [c for c in content if c.path in self.manifest.failures.suspects]
        content = [c for c in content if c.path not in self.manifest.failures.suspects]
        # PDFs and images (seconds each, in the extraction worker) after the notes, so that
        # the notes' words are searchable first; each is then a batch of its own, so that an
        # edit and the governor's rest come between two of them.
        content.sort(key=lambda c: kind_of(c.path) in EXTRACTED_KINDS)
        tally = _Tally(report, weights or {})
        tally.total = sum(tally.weight(c) for c in content) + sum(tally.weight(c) for c in suspects)
        report("index", 0, tally.total)
        marked: list[str] = []
        try:
            written = self._batches(content, summary, tally, marked, pool, read or {})
            written += self._isolate(suspects, marked, summary, tally)
        except BaseException:
            self.manifest.failures.abandon(marked)
            raise
        return Written(written, summary)

    def _touch(self, changes: Sequence[Change], summary: Summary) -> None:
        """Record the new stat of notes whose bytes did not change."""
        manifest = self.manifest
        touched = [c.state for c in changes if c.kind == "touched"]
        for start in range(0, len(touched), BATCH_NOTES):
            stats = touched[start : start + BATCH_NOTES]
            # The store's metadata carries the mtime ("modified since" filters): republish it
            # from stored vectors; no embedding.
            self.sync.restore(
                [c for s in stats for c in manifest.notes.chunks_of(s.path)],
                mtimes={s.path: s.mtime_ns for s in stats},
            )
            manifest.apply(touched=stats)
        summary.notes_touched += len(touched)
        # Checked and found as recorded: the new time of the hash is all there is to keep.
        verified = [c.state for c in changes if c.kind == "verified"]
        for start in range(0, len(verified), BATCH_NOTES):
            manifest.apply(touched=verified[start : start + BATCH_NOTES])

    def _batches(
        self,
        content: Sequence[Change],
        summary: Summary,
        tally: _Tally,
        marked: list[str],
        pool: ParserPool | None,
        read: dict[str, Read],
    ) -> list[str]:
        """Write `content` a batch at a time; the notes written."""
        written: list[str] = []
        batch: list[Prepared] = []
        failed: list[Failed] = []
        # Notes read ahead for the pool and not yet written: in hand at a pause point.
        ahead: set[str] = set()
        batch_chunks = batch_bytes = 0
        # Sources of moves whose new path could not be read (moved or deleted again since the
        # scan): no later event names them, so nothing else would ever delete them.
        left: list[str] = []
        for change, outcome in self.preparer.all(content, marked, pool, read, ahead):
            batch_bytes += tally.weight(change)
            if isinstance(outcome, Prepared):
                batch.append(outcome)
                batch_chunks += len(outcome.chunks)
                written.append(outcome.note.path)
            else:
                failed.append(outcome)
                if change.kind == "moved" and change.old_path:
                    left.append(change.old_path)
            if (
                batch_chunks >= KEYWORD_BATCH_CHUNKS
                or len(batch) >= BATCH_NOTES
                or kind_of(change.path) in EXTRACTED_KINDS
            ):
                self._flush(batch, failed, summary)
                ahead.difference_update(p.change.path for p in batch)
                ahead.difference_update(f.path for f in failed)
                batch, failed, batch_chunks = [], [], 0
                tally.advance(batch_bytes)
                batch_bytes = 0
                # The notes read ahead for the pool are in hand: an edit of one waits.
                self.pauses(frozenset(ahead))
        self._flush(batch, failed, summary)
        tally.advance(batch_bytes)
        self._forget(left, summary)
        return written

    def _isolate(
        self, suspects: Sequence[Change], marked: list[str], summary: Summary, tally: _Tally
    ) -> list[str]:
        """Crash suspects, each in a batch of its own: if the process dies again, whether in
        the parser or the store, the note in flight is the one that did it (the embedding
        phase isolates its own suspects). Returns the notes written.

        A write per note costs about 40 ms more per note; only the notes in hand at an
        unclean end pay it, once.
        """
        written: list[str] = []
        for change in suspects:
            self.manifest.failures.hold([change])
            marked.append(change.path)
            outcome = self.preparer.one(change)
            if isinstance(outcome, Prepared):
                self._flush([outcome], [], summary)
                written.append(outcome.note.path)
            else:
                self._flush([], [outcome], summary)
            # Still a suspect: the embedding phase tries its chunks alone too.
            self.pauses(frozenset())
            tally.advance(tally.weight(change))
        return written

    def _forget(self, paths: Sequence[str], summary: Summary) -> None:
        """Delete these notes, but not one recreated since the scan (a backlog overtaken by a
        fresh edit)."""
        deleted = [path for path in paths if self.discovery.state_of(path) is None]
        if deleted:
            ids = [i for path in deleted for i in self.manifest.notes.chunk_ids(path)]
            self.store.delete(ids)
            self.manifest.apply(deleted=deleted)
            summary.notes_deleted += len(deleted)
            for path in deleted:
                self.outcomes.tell("note_deleted", path=path)
            summary.chunks_deleted += len(ids)

    def _flush(self, batch: list[Prepared], failed: list[Failed], summary: Summary) -> None:
        """Commit the batch's notes and chunks (the keyword phase's write).

        A chunk whose text has a stored vector goes to the store at once; the others await
        the embedding phase. Records go to the store on the writer's thread, and the manifest
        moves once they are all in.
        """
        if batch:
            vectors = {h: v for p in batch for h, v in p.vectors.items()}
            hashes = {c.hash for p in batch for c in p.chunks} - vectors.keys()
            if hashes:
                vectors.update(self.manifest.vectors.get(self.model_id, hashes))
            writer = self.writer
            written: set[str] = set()
            published: set[str] = set()
            try:
                for p in batch:
                    for record, text_hash in self._records(p, vectors):
                        writer.add(record, vectors[text_hash])
                        written.add(record.path)
                        published.add(record.id)
                writer.finish()
            except BaseException:
                writer.discard()
                back = [p for p in batch if p.change.path in written]
                self.sync.put_back(
                    [c.id for p in back for c in p.chunks], [p.change.path for p in back]
                )
                raise
            self._write(batch, published, summary)
        summary.add(self.outcomes.record_failures(failed))

    def _records(self, p: Prepared, hashes: Container[str]) -> Iterator[tuple[Record, str]]:
        """The store's record of each chunk of a note whose text's hash is in `hashes`, with
        that hash."""
        for c in p.chunks:
            if c.hash not in hashes:
                continue
            metadata = chunk_metadata(
                path=p.note.path,
                title=p.note.title,
                tags=p.note.tags,
                aliases=p.note.aliases,
                link_targets=links_within(
                    ((link.target, link.line) for link in p.note.links), c.start_line, c.end_line
                ),
                section=c.section,
                headings=c.headings,
                index=c.index,
                start_line=c.start_line,
                end_line=c.end_line,
                mtime_ns=p.change.mtime_ns,
                sha256=p.change.sha256,
                model_id=self.model_id,
                kind=p.note.kind,
                location=c.location,
            )
            yield Record(c.id, p.change.path, c.text, metadata), c.hash

    def _write(self, batch: list[Prepared], published: set[str], summary: Summary) -> None:
        """Finish the batch whose records with vectors the writer has stored: drop from the
        store what its notes no longer have and what awaits new vectors, then move the
        manifest forward."""
        if not batch:
            return
        stale: list[str] = []
        moved_from: list[str] = []
        written: list[NoteWritten] = []
        for p in batch:
            change = p.change
            new_ids = {c.id for c in p.chunks}
            # An id kept with new text awaits its vector: its old record must not answer.
            stale.extend(i for i in p.old_ids if i not in published)
            if change.old_path:  # a move, even one whose content changed on the way
                moved_from.append(change.old_path)
                stale.extend(p.moved_ids)
            package = self.packages.of(p.note)
            written.append(
                NoteWritten(p.note, change.state, change.sha256, tuple(p.chunks), package)
            )
            summary.chunks_reused += sum(1 for c in p.chunks if c.id in published)
            if change.kind == "moved":
                summary.notes_moved += 1
            else:
                summary.notes_changed += 1
                if change.kind == "modified":
                    summary.chunks_deleted += sum(1 for i in p.old_ids if i not in new_ids)
        if stale:
            self.store.delete(stale)
        # Only now, with the store holding the batch, does the manifest move forward.
        self.manifest.apply(
            written,
            deleted=moved_from,
            # A suspect stays one until the embedding phase has tried its chunks alone too.
            done=[p.change.path for p in batch],
        )
        for p in batch:
            self.outcomes.tell("note_indexed", path=p.change.path)
