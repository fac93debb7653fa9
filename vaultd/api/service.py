"""What the socket API asks of a running index: the narrow interface the daemon implements.

The server sees only this, never the daemon: routes check and translate a request, then call
one of these methods. Raising NotReadyError means "starting, ask again" (503 not_ready).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vaultd.query import Filters, Mode
    from vaultd.records import Hit


class Service(Protocol):
    #: The vault served and its data directory (the answers' headers, health, the record).
    vault: Path
    data_dir: Path

    def health(self) -> tuple[str, list[str]]:
        """The health ("starting", "ok" or "degraded") and the reasons it is not ok."""
        ...

    def status(self) -> dict[str, Any]:
        """Everything `vaultd status` shows, as JSON."""
        ...

    def search(
        self,
        query: str,
        *,
        k: int,
        mode: Mode,
        filters: Filters,
        per_note: int | None,
        merge: bool | None,
        snippets: bool = False,
    ) -> list[Hit]: ...

    def find_note(self, name: str) -> str | None:
        """The indexed note a name means, as Obsidian resolves it (`Canvas` is
        `Plugins/Canvas.md`; see vaultd.index.names), or None."""
        ...

    def note(self, path: str) -> dict[str, Any] | None:
        """An indexed note as the API shows it (None: not indexed)."""
        ...

    def related(
        self,
        path: str,
        *,
        k: int,
        lines: tuple[int, int] | None,
        exclude_linked: bool,
        filters: Filters,
        how: str,
    ) -> list[dict[str, Any]] | None:
        """The notes nearest `path` by meaning, as JSON (None: no such indexed note). Raises
        QueryError for a range with no passage, VectorsPendingError before its vectors."""
        ...

    def mentions(self, path: str, k: int) -> list[dict[str, Any]] | None:
        """Passages of other notes naming `path` without linking to it (None: no such
        indexed note)."""
        ...

    def outline(self, path: str) -> list[dict[str, Any]] | None:
        """The note's headings with their sections' line ranges, as on disk now (None: no
        such indexed note). Raises NoteUnavailableError or NoteError as `read_note` does."""
        ...

    def tags(self, prefix: str) -> list[dict[str, Any]]:
        """Every tag (or those under `prefix`) with how many notes hold it."""
        ...

    def recent(self, k: int, since_ns: int | None) -> list[dict[str, Any]]:
        """The most recently modified notes, newest first."""
        ...

    def read_note(self, path: str) -> bytes:
        """The note's bytes on disk now, read as the indexer reads them."""
        ...

    def reindex(self, paths: Sequence[str]) -> None:
        """Compare these notes (none: the whole vault) with the index again, soon."""
        ...

    def export(self, with_vectors: bool) -> Iterator[dict[str, Any]]:
        """Every chunk record in the store, sorted by id."""
        ...

    def wait(self, target: str, timeout: float) -> bool:
        """Block until `target` (a vault path, or "idle") is indexed; False on timeout."""
        ...
