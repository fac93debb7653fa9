"""Link targets resolve to the vault paths Obsidian would open."""

from __future__ import annotations

import pytest

from vaultd.index.links import LinkResolver

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
    ],
)
def test_targets_resolve_as_obsidian_resolves_them(
    target: str, source: str, expected: str | None
) -> None:
    assert LinkResolver(PATHS).resolve(target, source) == expected
