"""Which note a link points to, resolved as Obsidian resolves it.

A link's target is what was written (`[[Core plugins]]`, `[[Plugins/Core plugins#Sync]]`,
`[text](../Ideas.md)`); clients want the vault path they can read (`Plugins/Core plugins.md`).
Obsidian compares names case-insensitively, with or without `.md`, and tries, in order:

1. the target as a path from the vault's root;
2. the target as a path from the linking note's folder (Markdown links are often relative);
3. any note whose path ends with the target (its name, or its last folders and its name),
   preferring one in the linking note's folder, then the one with the shortest path.

A target no note answers to is unresolved (`None`): a note not written yet, an attachment
(`![[diagram.png]]`) or a note the rules leave out.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Iterable, Sequence

from vaultd.storage.manifest import Manifest, link_key


def _wanted(target: str) -> str:
    return link_key(target.split("#", 1)[0].split("|", 1)[0]).lstrip("/")


def target_names(target: str, source: str) -> set[str]:
    """The note names a link target (as written in `source`) can resolve to: lower-cased,
    without ".md", folders, heading or alias, as written and as the path from `source`'s
    folder normalizes (`[[Ideas/]]` is "ideas"). A resolver needs only the notes of those
    names (`manifest.links.paths_named`)."""
    wanted = _wanted(target)
    relative = posixpath.normpath(posixpath.join(posixpath.dirname(source).lower(), wanted))
    return {wanted.rsplit("/", 1)[-1], relative.rsplit("/", 1)[-1]}


class LinkResolver:
    """Resolves link targets against one snapshot of the vault's note paths."""

    def __init__(self, paths: Iterable[str]) -> None:
        self._by_key: dict[str, str] = {}
        self._by_name: dict[str, list[str]] = defaultdict(list)
        for path in sorted(paths):
            key = link_key(path)
            self._by_key.setdefault(key, path)
            self._by_name[key.rsplit("/", 1)[-1]].append(path)

    def resolve(self, target: str, source: str) -> str | None:
        """The vault path of the note `target` (as written in `source`) points to, or None."""
        wanted = _wanted(target)
        if not wanted:
            return None
        exact = self._by_key.get(wanted)
        if exact is not None:
            return exact
        folder = posixpath.dirname(source)
        relative = posixpath.normpath(posixpath.join(folder.lower(), wanted))
        if not relative.startswith("../"):
            found = self._by_key.get(relative)
            if found is not None:
                return found
        name = wanted.rsplit("/", 1)[-1]
        suffix = "/" + wanted
        matches = [p for p in self._by_name.get(name, []) if ("/" + link_key(p)).endswith(suffix)]
        if not matches:
            return None
        return min(
            matches,
            key=lambda p: (posixpath.dirname(p) != folder, p.count("/"), len(p), p),
        )


def resolve_links(manifest: Manifest, path: str, targets: Sequence[str]) -> list[str | None]:
    """Each of `path`'s link targets resolved, against only the notes of the names they can
    mean (not a resolver over the whole vault for every note asked about)."""
    names = (name for target in targets for name in target_names(target, path))
    resolver = LinkResolver(manifest.links.paths_named(names))
    return [resolver.resolve(target, path) for target in targets]
