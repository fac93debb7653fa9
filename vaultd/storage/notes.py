"""The notes and chunks tables: what was seen of each note on disk (size, mtime, SHA-256, its
stat), what was made of it (fields, status, chunks), and the reads of them.

`NotesController` is the manifest's `notes`, the one writer of both tables; a write alone is
one transaction, and within the manifest's (`Manifest.apply`) part of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vaultd.records import (
    Chunk,
    FileState,
    KnownNote,
    Link,
    Location,
    NoteWritten,
    StoredChunk,
    kind_of,
)
from vaultd.storage.connection import Connection
from vaultd.storage.schema import IN_KEYS, keys
from vaultd.storage.vocabulary import Names


@dataclass(frozen=True, slots=True)
class NoteRecord:
    """A note as recorded: what a scan compares with its file, and its fields (`row`)."""

    known: KnownNote
    row: dict[str, Any]


CHUNK_COLUMNS = (
    "id, path, idx, hash, title, section, headings, start_line, end_line, tokens, text, context, "
    "page, page_end, node, symbol"
)
_KNOWN_COLUMNS = (
    "path, size, mtime_ns, sha256, status, attempts, ctime_ns, inode, hashed_ns, left_out"
)


class NotesController:
    """The notes and their chunks: what a scan compares with the disk, what search and the
    store read of them, and the rows written for each note's outcome."""

    def __init__(self, connection: Connection) -> None:
        self._query = connection.query
        self._transaction = connection.transaction

    def known(self) -> dict[str, KnownNote]:
        rows = self._query(f"SELECT {_KNOWN_COLUMNS} FROM notes", ())
        return {r[0]: _known(r) for r in rows}

    def known_subset(self, paths: Iterable[str], dirs: Iterable[str]) -> dict[str, KnownNote]:
        """The known notes among `paths` and under the folders `dirs`."""
        cols = f"SELECT {_KNOWN_COLUMNS} FROM notes"
        paths = set(paths)
        rows: list[Any] = (
            self._query(f"{cols} WHERE path {IN_KEYS}", (keys(paths),)) if paths else []
        )
        for folder in dirs:
            prefix = folder.strip("/") + "/"
            rows += self._query(f"{cols} WHERE substr(path, 1, ?) = ?", (len(prefix), prefix))
        return {r[0]: _known(r) for r in rows}

    def records(self, paths: Iterable[str]) -> dict[str, NoteRecord]:
        """These notes as recorded (those the manifest holds), in one read."""
        paths = set(paths)
        if not paths:
            return {}
        rows = self._query(
            f"SELECT {_KNOWN_COLUMNS}, title, aliases, tags, links, frontmatter, error, kind, "
            f"package FROM notes WHERE path {IN_KEYS}",
            (keys(paths),),
        )
        return {
            r[0]: NoteRecord(
                _known(r[:10]),
                {
                    "path": r[0],
                    "title": r[10],
                    "aliases": json.loads(r[11]),
                    "tags": json.loads(r[12]),
                    "links": json.loads(r[13]),
                    "frontmatter": json.loads(r[14]),
                    "sha256": r[3],
                    "mtime_ns": r[2],
                    "status": r[4],
                    "error": r[15],
                    "kind": r[16],
                    "package": r[17],
                },
            )
            for r in rows
        }

    def row(self, path: str) -> dict[str, Any] | None:
        """One note's fields as recorded (None: not recorded)."""
        record = self.records([path]).get(path)
        return None if record is None else record.row

    def chunk_ids(self, path: str | None = None) -> list[str]:
        if path is None:
            return [r[0] for r in self._query("SELECT id FROM chunks ORDER BY id", ())]
        return [
            r[0] for r in self._query("SELECT id FROM chunks WHERE path = ? ORDER BY idx", (path,))
        ]

    def chunks_of(self, path: str) -> list[StoredChunk]:
        rows = self._query(
            f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE path = ? ORDER BY idx", (path,)
        )
        return [stored(r) for r in rows]

    def chunks_by_id(self, ids: Sequence[str]) -> dict[str, StoredChunk]:
        if not ids:
            return {}
        rows = self._query(f"SELECT {CHUNK_COLUMNS} FROM chunks WHERE id {IN_KEYS}", (keys(ids),))
        return {row[0]: stored(row) for row in rows}

    def first_chunk_ids(self) -> frozenset[str]:
        """Every note's first passage (8 ms for obsidian-hub's 6,568 notes, by the index of
        paths: a scan for `idx = 0` reads every passage's text)."""
        sql = "SELECT id FROM chunks INDEXED BY chunks_path WHERE idx = 0 AND path > ''"
        return frozenset(r[0] for r in self._query(sql, ()))

    def chunk_counts(self, paths: Sequence[str] | None = None) -> dict[str, int]:
        """How many passages each of `paths` has, or each note (None); notes without any
        are left out."""
        if paths is None:
            return dict(self._query("SELECT path, COUNT(*) FROM chunks GROUP BY path", ()))
        if not paths:
            return {}
        sql = f"SELECT path, COUNT(*) FROM chunks WHERE path {IN_KEYS} GROUP BY path"
        return dict(self._query(sql, (keys(paths),)))

    def paths_of_chunks(self, ids: Sequence[str]) -> dict[str, str]:
        """Each chunk's note (for chunks still indexed)."""
        if not ids:
            return {}
        return dict(self._query(f"SELECT id, path FROM chunks WHERE id {IN_KEYS}", (keys(ids),)))

    def tags_of(self, paths: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The tags each of these notes carries, as written (for search hits)."""
        rows = self._query(f"SELECT path, tags FROM notes WHERE path {IN_KEYS}", (keys(paths),))
        return {r[0]: tuple(json.loads(r[1])) for r in rows}

    def kinds_of(self, paths: Sequence[str]) -> dict[str, str]:
        """Each recorded note's kind (`records.NoteKind`), by path."""
        if not paths:
            return {}
        return dict(
            self._query(f"SELECT path, kind FROM notes WHERE path {IN_KEYS}", (keys(paths),))
        )

    def packages_of(self, paths: Sequence[str]) -> dict[str, str]:
        """The package of each of these notes that has one (a source file's), by path."""
        if not paths:
            return {}
        sql = f"SELECT path, package FROM notes WHERE package IS NOT NULL AND path {IN_KEYS}"
        return dict(self._query(sql, (keys(paths),)))

    def code_packages(self, folders: Iterable[str] | None = None) -> dict[str, str | None]:
        """The recorded package of every source file (kind `code`), or of those under `folders`
        ("" for the whole vault), by path."""
        sql = "SELECT path, package FROM notes WHERE kind = 'code'"
        if folders is None:
            return dict(self._query(sql, ()))
        out: dict[str, str | None] = {}
        for folder in set(folders):
            if not folder:
                return dict(self._query(sql, ()))
            prefix = folder.strip("/") + "/"
            out.update(self._query(f"{sql} AND substr(path, 1, ?) = ?", (len(prefix), prefix)))
        return out

    def set_packages(self, packages: Mapping[str, str | None]) -> None:
        """Give these notes their package (path -> package); nothing else of them changes."""
        rows = [(package, path) for path, package in packages.items()]
        with self._transaction() as db:
            db.executemany("UPDATE notes SET package = ? WHERE path = ?", rows)

    def paths(self) -> list[str]:
        """Every note the index holds (a link resolves to any of them)."""
        return [r[0] for r in self._query("SELECT path FROM notes", ())]

    def status_counts(self) -> tuple[dict[str, int], int]:
        """Notes by status, and chunks."""
        by_status = dict(self._query("SELECT status, COUNT(*) FROM notes GROUP BY status", ()))
        return by_status, self._query("SELECT COUNT(*) FROM chunks", ())[0][0]

    def names(self) -> Names:
        """Every note's names, folded, for known-item search; a file left out has none."""
        sql = "SELECT path, title, aliases FROM notes WHERE status != 'left_out'"
        return Names.of(self._query(sql, ()))

    def kind_counts(self) -> dict[str, dict[str, int]]:
        """Files by kind (`records.NoteKind`) and status: {"pdf": {"ok": 3, "left_out": 1}}.

        An indexed file's kind is the one it was indexed as; one not indexed (failed, left out)
        goes by its name, else by what it was last indexed as.
        """
        out: dict[str, dict[str, int]] = {}
        for path, kind, status in self._query("SELECT path, kind, status FROM notes", ()):
            if status != "ok":
                kind = kind_of(path) or kind
            counts = out.setdefault(kind, {})
            counts[status] = counts.get(status, 0) + 1
        return out

    def delete(self, path: str) -> None:
        """A note's chunks and its row (its links, tags and suspicion are their owners')."""
        with self._transaction() as db:
            db.execute("DELETE FROM chunks WHERE path = ?", (path,))
            db.execute("DELETE FROM notes WHERE path = ?", (path,))

    def touch(self, touched: Sequence[FileState]) -> None:
        """The stat, read under, of notes whose bytes did not change."""
        with self._transaction() as db:
            db.executemany(
                "UPDATE notes SET size = ?, mtime_ns = ?, ctime_ns = ?, inode = ?, hashed_ns = ? "
                "WHERE path = ?",
                [(t.size, t.mtime_ns, t.ctime_ns, t.inode, t.hashed_ns, t.path) for t in touched],
            )

    def rechunk(self, paths: Iterable[str] | None = None) -> int:
        """Make these indexed notes (all, with None) look changed, so that the next pass reads
        and chunks them again: after a switch of model, whose tokenizer cuts other chunks, or
        for chunks whose embedded text cannot be made again from what is stored. They stay
        searchable by their words meanwhile."""
        update = "UPDATE notes SET sha256 = '', mtime_ns = 0 WHERE"
        with self._transaction() as db:
            if paths is None:
                return int(db.execute(f"{update} status = 'ok'").rowcount)
            rows = [(p,) for p in paths]
            db.executemany(f"{update} path = ? AND status = 'ok'", rows)
            return len(rows)

    def write(self, w: NoteWritten, now: float) -> None:
        """A note indexed: its chunks and its row (its links and tags are their owners')."""
        note = w.note
        chunks = [
            (
                c.id,
                note.path,
                c.index,
                c.hash,
                note.title,
                c.section,
                json.dumps(list(c.headings), ensure_ascii=False),
                c.start_line,
                c.end_line,
                c.tokens,
                c.text,
                "\n".join(note.aliases),
                c.context,
                c.location.page,
                c.location.page_end,
                c.location.node,
                c.location.symbol,
            )
            for c in w.chunks
        ]
        with self._transaction() as db:
            db.execute("DELETE FROM chunks WHERE path = ?", (note.path,))
            db.executemany(
                "INSERT INTO chunks(id, path, idx, hash, title, section, headings, start_line, "
                "end_line, tokens, text, aliases, context, page, page_end, node, symbol) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunks,
            )
            # Failures on this content still count: its vectors (the embedding phase's) may
            # fail again, and enough failures quarantine it.
            before = db.execute(
                "SELECT attempts FROM notes WHERE path = ? AND sha256 = ? "
                "AND status IN ('ok', 'failed')",
                (note.path, w.sha256),
            ).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO notes(path, size, mtime_ns, sha256, status, error, "
                "attempts, title, aliases, tags, links, frontmatter, indexed_at, ctime_ns, "
                "inode, hashed_ns, kind, package) "
                "VALUES (?, ?, ?, ?, 'ok', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    note.path,
                    w.state.size,
                    w.state.mtime_ns,
                    w.sha256,
                    "; ".join(note.errors) or None,
                    before[0] if before else 0,
                    note.title,
                    json.dumps(list(note.aliases), ensure_ascii=False),
                    json.dumps(list(note.tags), ensure_ascii=False),
                    json.dumps([_link_json(link) for link in note.links], ensure_ascii=False),
                    json.dumps(note.frontmatter, ensure_ascii=False, default=str),
                    now,
                    w.state.ctime_ns,
                    w.state.inode,
                    w.state.hashed_ns,
                    note.kind,
                    w.package,
                ),
            )


def _link_json(link: Link) -> dict[str, Any]:
    return {
        "target": link.target,
        "heading": link.heading,
        "block": link.block,
        "alias": link.alias,
        "embed": link.embed,
        "line": link.line,
    }


def _known(row: Sequence[Any]) -> KnownNote:
    path, size, mtime_ns, sha256, status, attempts, ctime_ns, inode, hashed_ns, left_out = row
    return KnownNote(
        path,
        size,
        mtime_ns,
        sha256,
        status == "ok",
        attempts,
        quarantined=status == "quarantined",
        ctime_ns=ctime_ns,
        inode=inode,
        hashed_ns=hashed_ns,
        left_out=(left_out or "") if status == "left_out" else "",
    )


def stored(row: Sequence[Any]) -> StoredChunk:
    text, context = row[10], row[11]
    chunk = Chunk(
        id=row[0],
        index=row[2],
        section=row[5],
        headings=tuple(json.loads(row[6])),
        start_line=row[7],
        end_line=row[8],
        text=text,
        # What the model embeds, as the chunker made it (`chunk_note`); a chunk written
        # before schema 8 has no context ("").
        embed_text=f"{context}\n\n{text}",
        tokens=row[9],
        hash=row[3],
        context=context,
        location=Location(row[12], row[13], row[14], row[15]),
    )
    return StoredChunk(path=row[1], title=row[4], chunk=chunk)


def batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
