"""A note's backlinks: each note linking to it, with the passages that hold the links.

A link counts when it resolves to the note as Obsidian resolves it (`vaultd.index.links`), so
`[[Canvas]]` in any folder, `[[Plugins/Canvas]]` and `[x](../Plugins/Canvas.md)` count, and a
`[[Canvas]]` that Obsidian opens as another note of that name does not. Candidates come from
the manifest's link table by the note's file name; only their links are resolved, never the
whole vault's. A passage is the indexed chunk holding the link's line, so what a reader sees
is what search shows; a link in front matter has no passage and belongs to the note.
"""

from __future__ import annotations

from dataclasses import dataclass

from vaultd.index.links import resolve_links
from vaultd.records import StoredChunk
from vaultd.storage.manifest import Manifest, link_key


@dataclass(frozen=True, slots=True)
class Passage:
    """The chunk of a linking note around one or more of its links to the note."""

    section: str
    start_line: int
    end_line: int
    text: str
    #: The 1-based lines in this passage that hold a link to the note.
    link_lines: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Backlink:
    """One note linking to the note asked about."""

    path: str
    title: str
    #: How many of its links point to the note (front matter's included).
    links: int
    passages: tuple[Passage, ...]


def backlinks_of(manifest: Manifest, path: str) -> list[Backlink]:
    """The notes linking to `path`, the one with the most links first, then by path."""
    name = link_key(path).rsplit("/", 1)[-1]
    found: list[Backlink] = []
    for source in manifest.links.sources(name):
        if source == path:
            continue  # `[[#Heading]]` and links to itself are no backlinks
        row = manifest.notes.row(source)
        if row is None:
            continue
        links = row.get("links", [])
        targets = [str(link.get("target", "")) for link in links]
        resolved = resolve_links(manifest, source, targets)
        hits = [link for link, to in zip(links, resolved, strict=True) if to == path]
        if not hits:
            continue
        lines = sorted({int(link["line"]) for link in hits if link.get("line") is not None})
        found.append(
            Backlink(
                path=source,
                title=str(row.get("title") or ""),
                links=len(hits),
                passages=_passages(manifest.notes.chunks_of(source), lines),
            )
        )
    found.sort(key=lambda b: (-b.links, b.path))
    return found


def _passages(chunks: list[StoredChunk], lines: list[int]) -> tuple[Passage, ...]:
    out: list[Passage] = []
    for chunk in (stored.chunk for stored in chunks):
        inside = tuple(n for n in lines if chunk.start_line <= n <= chunk.end_line)
        if inside:
            out.append(Passage(chunk.section, chunk.start_line, chunk.end_line, chunk.text, inside))
    return tuple(out)
