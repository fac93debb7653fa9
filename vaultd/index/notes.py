"""An indexed note as the socket API shows it: its manifest row with every link resolved, its
backlinks and its chunks."""

from __future__ import annotations

from typing import Any

from vaultd.index.links import resolve_links
from vaultd.records import chunk_json
from vaultd.storage.manifest import Manifest


def note_view(manifest: Manifest, path: str) -> dict[str, Any] | None:
    row = manifest.notes.row(path)
    if row is None:
        return None
    chunks = manifest.notes.chunks_of(path)
    row.pop("mtime_ns", None)
    if row.get("package") is None:
        row.pop("package", None)  # only a source file in a package has one
    targets = [str(link.get("target", "")) for link in row.get("links", [])]
    row["links"] = [
        {**link, "path": resolved}
        for link, resolved in zip(
            row.get("links", []), resolve_links(manifest, path, targets), strict=True
        )
    ]
    return {
        **row,
        "backlinks": manifest.links.backlinks(path, row.get("aliases", [])),
        "chunks": [chunk_json(c.chunk) for c in chunks],
    }
