"""The metadata stored with each chunk in Chroma, from a note as parsed or as recorded: the
store's shape of a chunk, kept beside the store that writes it (`vectors`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from vaultd.records import NOWHERE, Location, StoredChunk
from vaultd.storage.filters import tag_ancestors
from vaultd.storage.vectors import Metadata


def chunk_metadata(
    *,
    path: str,
    title: str,
    tags: Sequence[str],
    aliases: Sequence[str],
    link_targets: Iterable[str],
    section: str,
    headings: Sequence[str],
    index: int,
    start_line: int,
    end_line: int,
    mtime_ns: int,
    sha256: str,
    model_id: str,
    kind: str = "note",
    location: Location = NOWHERE,
) -> Metadata:
    """The metadata stored with each chunk in Chroma; empty lists and unset locations are
    left out (Chroma rejects None and empty lists). `link_targets` are the chunk's own (see
    `links_within`)."""
    folders = PurePosixPath(path).parent.parts
    meta: dict[str, Any] = {
        "path": path,
        "title": title,
        "section": section,
        "headings": " > ".join(headings),
        "index": index,
        "start_line": start_line,
        "end_line": end_line,
        "mtime": mtime_ns / 1e9,
        "note_hash": sha256,
        "model": model_id,
        "kind": kind,
        **location.as_json(),
    }
    lists = {
        "tags": list(tags),
        "tag_paths": sorted(tag_ancestors(tags)),
        "folders": ["/".join(folders[: i + 1]) for i in range(len(folders))],
        "aliases": list(aliases),
        "links": sorted(set(link_targets)),
    }
    meta.update({k: v for k, v in lists.items() if v})
    return meta


def links_within(
    links: Iterable[tuple[str, int | None]], start_line: int, end_line: int
) -> list[str]:
    """Targets of the links written in these lines, and of the front matter's (line None).

    A chunk carries its own links, not its note's: a hub note links hundreds of notes, and
    Chroma stores a list value as one row per item for every record, so the note's links on
    each of its chunks made most of the store's size and write time.
    """
    return [t for t, line in links if line is None or start_line <= line <= end_line]


def stored_metadata(stored: StoredChunk, row: Mapping[str, Any], model_id: str) -> Metadata:
    """`chunk_metadata` of a recorded chunk, with its note's recorded `row`
    (`manifest.notes.row`)."""
    chunk = stored.chunk
    return chunk_metadata(
        path=stored.path,
        title=stored.title,
        tags=row.get("tags", ()),
        aliases=row.get("aliases", ()),
        link_targets=links_within(
            ((link["target"], link.get("line")) for link in row.get("links", ())),
            chunk.start_line,
            chunk.end_line,
        ),
        section=chunk.section,
        headings=chunk.headings,
        index=chunk.index,
        start_line=chunk.start_line,
        end_line=chunk.end_line,
        mtime_ns=int(row.get("mtime_ns", 0)),
        sha256=str(row.get("sha256", "")),
        model_id=model_id,
        kind=str(row.get("kind", "note")),
        location=chunk.location,
    )
