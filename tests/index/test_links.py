"""Link targets resolve to the vault paths Obsidian would open."""

from __future__ import annotations

import pytest

from vaultd.index.links import LinkResolver, target_names
from vaultd.storage.manifest import link_key

PATHS = [
    "Home.md",
    "Plugins/Core plugins.md",
    "Plugins/Sync.md",
    "Archive/Sync.md",
    "Archive/2023/Sync.md",
    "Projects/Alpha/Notes.md",
    "Projects/Beta/Notes.md",
    "Über uns.md",
]


@pytest.mark.parametrize(
    ("target", "source", "expected"),
    [
        ("Core plugins", "Home.md", "Plugins/Core plugins.md"),  # by name, anywhere
        ("core PLUGINS", "Home.md", "Plugins/Core plugins.md"),  # case does not matter
        ("Core plugins.md", "Home.md", "Plugins/Core plugins.md"),
        ("Core plugins#Settings", "Home.md", "Plugins/Core plugins.md"),  # a heading
        ("Core plugins|the plugins", "Home.md", "Plugins/Core plugins.md"),  # an alias
        ("Plugins/Sync", "Home.md", "Plugins/Sync.md"),  # a path from the root
        ("2023/Sync", "Home.md", "Archive/2023/Sync.md"),  # the last folders and the name
        ("Sync", "Archive/Index.md", "Archive/Sync.md"),  # the linking note's folder first
        ("Sync", "Home.md", "Archive/Sync.md"),  # else the shortest path, then by name
        ("../Beta/Notes.md", "Projects/Alpha/Todo.md", "Projects/Beta/Notes.md"),  # relative
        ("Notes", "Projects/Beta/Todo.md", "Projects/Beta/Notes.md"),
        ("Über uns", "Home.md", "Über uns.md"),
        ("Not written yet", "Home.md", None),
        ("diagram.png", "Home.md", None),  # an attachment is not a note
        ("", "Home.md", None),
        ("../../../etc/passwd", "Home.md", None),
        ("Plugins/", "Home.md", None),  # a folder is not a note...
        ("Alpha/", "Projects/Todo.md", None),
        ("Beta/Notes/.", "Projects/Todo.md", "Projects/Beta/Notes.md"),  # ...but normalizes
        ("Sync/", "Plugins/Index.md", "Plugins/Sync.md"),
    ],
)
def test_targets_resolve_as_obsidian_resolves_them(
    target: str, source: str, expected: str | None
) -> None:
    assert LinkResolver(PATHS).resolve(target, source) == expected
    # Only the notes of the names the target can mean are needed (`manifest.links.paths_named`).
    names = target_names(target, source)
    named = [p for p in PATHS if link_key(p).rsplit("/", 1)[-1] in names]
    assert LinkResolver(named).resolve(target, source) == expected
