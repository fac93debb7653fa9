"""Which indexed note a name means, as Obsidian's quick switcher and links take it.

People name notes the way Obsidian shows them: `Canvas`, `canvas.md`, `Plugins/Canvas`, not
always the vault path `Plugins/Canvas.md`. A name given exactly as an indexed path is that
note; anything else is resolved as a link written at the vault's root would be
(`vaultd.index.links`): case-insensitive, with or without ".md", a folder prefix optional, and
among several notes of the same name the one nearest the root, then the shortest path. That
is the note `[[Canvas]]` opens in Obsidian, so the answer never surprises someone who uses it.
"""

from __future__ import annotations

from vaultd.index.links import LinkResolver, target_names
from vaultd.storage.manifest import Manifest


def note_named(manifest: Manifest, name: str) -> str | None:
    """The vault path of the indexed note `name` means, or None when none answers to it."""
    if manifest.notes.row(name) is not None:
        # An exact path first: a file name may hold what a link cannot ("#", "|").
        return name
    resolver = LinkResolver(manifest.links.paths_named(target_names(name, "")))
    return resolver.resolve(name, "")
