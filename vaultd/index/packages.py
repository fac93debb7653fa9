"""Each source file's package, recorded and kept fresh.

The rule is the pipeline's (vaultd.pipeline.packages); this module gives it the vault's own
safe reading (a manifest is read as a note is, never through a link out of the vault, and
not where the vault's rules leave files out, though it need not be of a kind indexed), names
the package of each source file the keyword phase writes, and re-attributes the files under a
manifest that changed.

A package is the note's, in the manifest's notes table, and nowhere else: the vector side is
searched inside the notes the filters select, by path, so re-attributing a file changes one
column of its row, never a chunk, a vector or a record of the store, and embeds nothing.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable

import structlog

from vaultd import logs
from vaultd.errors import NoteError
from vaultd.pipeline.discover import Discovery
from vaultd.pipeline.packages import PackageFinder, folder_of, is_manifest
from vaultd.records import Note
from vaultd.storage.manifest import Manifest

log = structlog.get_logger(__name__)


def watch_rule(discovery: Discovery) -> Callable[[str, bool], bool]:
    """What the watcher leaves out: what the walk leaves out, except, where source files are
    indexed, a package manifest the other rules admit (`Cargo.toml` is no source file for
    `code = ["**/*.rs"]`, but its change re-attributes every file of its crate)."""
    code = "code" in discovery.rules.kinds

    def ignored(path: str, is_dir: bool) -> bool:
        if not discovery.is_ignored(path, is_dir=is_dir):
            return False
        if is_dir or not code or not is_manifest(path):
            return True
        return discovery.is_ignored(path, any_kind=True)

    return ignored


class Packages:
    """The packages of the vault's source files: named on write, re-attributed on a change
    of manifest and after every full pass."""

    def __init__(self, discovery: Discovery, manifest: Manifest) -> None:
        self.discovery = discovery
        self.manifest = manifest
        self.finder = PackageFinder(self._read)
        #: Folder -> the names in it, as listed this pass (see `_names`).
        self._listed: dict[str, frozenset[str] | None] = {}

    def _read(self, path: str) -> bytes | None:
        folder, _, name = path.rpartition("/")
        names = self._names(folder)
        if names is not None and name not in names:
            return None
        try:
            data, _ = self.discovery.read_note(path, any_kind=True)
        except (NoteError, OSError, ValueError):  # none there, left out, or unreadable
            return None
        return data

    def _names(self, folder: str) -> frozenset[str] | None:
        """The names in a folder (NFC), listed once a pass, or None when it cannot be listed
        as named. Only a shortcut: most folders hold no manifest, and the safe reading of a
        name that is not there costs a listing of its own."""
        if folder not in self._listed:
            try:
                listed = os.listdir(os.path.join(self.discovery.root, folder))
            except (OSError, ValueError):
                self._listed[folder] = None
            else:
                self._listed[folder] = frozenset(unicodedata.normalize("NFC", n) for n in listed)
        return self._listed[folder]

    def begin(self) -> None:
        """A pass begins: manifests are read again, once each for the whole pass."""
        self.finder.forget()
        self._listed.clear()

    def of(self, note: Note) -> str | None:
        """The package of a note written now: a source file's, None for other kinds."""
        return self.finder.of(note.path) if note.kind == "code" else None

    def changed(self, paths: Iterable[str]) -> int:
        """Re-attribute the source files under each manifest among `paths` (saved, created,
        deleted, or either end of a move); how many changed package."""
        folders = {folder_of(path) for path in paths if is_manifest(path)}
        if not folders:
            return 0
        # Read again even within a pass: the change may have come since its start.
        self.begin()
        return self.refresh(folders)

    def refresh(self, folders: Iterable[str] | None = None) -> int:
        """Name again the package of every recorded source file (under `folders` only, when
        given), and record those that differ; how many did."""
        recorded = self.manifest.notes.code_packages(folders)
        moved = {
            path: now
            for path, before in sorted(recorded.items())
            if (now := self.finder.of(path)) != before
        }
        if moved:
            self.manifest.notes.set_packages(moved)
            log.info(
                "packages re-attributed",
                **logs.notes(moved),
                packages=sorted({p for p in moved.values() if p is not None})[: logs.NAMED],
            )
        return len(moved)
