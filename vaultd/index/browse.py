"""Ways into a vault besides a query: its tags with their counts, the notes changed lately,
and a note's outline (its headings with their line ranges).

Tags and recent notes are read from the manifest. An outline is the note as it is on disk
now, parsed again (read through the discovery, so ignore rules and symlink checks hold): an
assistant asks for it to read a note's part by its line range.
"""

from __future__ import annotations

import time
from typing import Any

from vaultd.answers import Heading
from vaultd.pipeline.discover import Discovery
from vaultd.pipeline.parse import parse_note
from vaultd.query import MAX_LIST
from vaultd.storage.manifest import Manifest


def tags(manifest: Manifest, prefix: str = "") -> list[dict[str, Any]]:
    """Every tag with how many notes hold it, most used first (a nested tag's notes count for
    its parents too); with `prefix` ("project"), only that tag and those below it."""
    prefix = prefix.strip().lstrip("#").strip("/").lower()
    return [{"tag": tag, "notes": count} for tag, count in manifest.filters.tag_counts(prefix)]


def recent(manifest: Manifest, k: int, since_ns: int | None = None) -> list[dict[str, Any]]:
    """The `k` most recently modified notes, newest first (since `since_ns`, when given)."""
    notes = manifest.filters.recent(max(1, min(k, MAX_LIST)), since_ns)
    for note in notes:
        note["modified"] = _iso(note.pop("mtime_ns"))
    return notes


def _iso(mtime_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime_ns / 1e9))


def outline(discovery: Discovery, path: str, max_bytes: int) -> list[Heading]:
    """The headings of the note at `path` as it is on disk now, each with its section's lines.

    Raises NoteUnavailableError when it cannot be read, NoteError when it cannot be parsed.
    """
    data, _ = discovery.read_note(path)
    note = parse_note(path, data, max_bytes=max_bytes)
    lines = data.decode("utf-8", errors="replace").replace("\r\n", "\n").split("\n")
    found = [b for b in note.blocks if b.kind == "heading"]
    out: list[Heading] = []
    for i, block in enumerate(found):
        end = next(
            (later.start_line - 1 for later in found[i + 1 :] if later.level <= block.level),
            len(lines),
        )
        # Not the blank lines before the next heading.
        while end > block.start_line and not lines[end - 1].strip():
            end -= 1
        out.append(Heading(block.level, block.info, block.start_line, end))
    return out
