"""What the API asks of an index: `Reads`, answered from an open index with or without a
daemon, and `Service`, a running daemon's whole interface.

Each method is an operation of vaultd.api.operations, named after it: it takes the operation's
request model and returns its response model. The server sees only this, never the daemon.
The local implementation (vaultd.api.local) answers the reads over an open index; the daemon's
(vaultd.daemon.serving) adds what needs a running daemon; the socket client
(vaultd.api.client) is the same interface from another process.

Errors are the package's: QueryError and VaultPathError for what was asked badly (400),
NoteUnavailableError for a note that is not there (404), NoteError for one that cannot be read
(422), NotReadyError for "starting, ask again" (503).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

from vaultd.api import operations as o


class Reads(Protocol):
    """The operations an open index answers alone."""

    #: The vault served and its data directory (the answers' headers, health, the record).
    vault: Path
    data_dir: Path

    def search(self, request: o.SearchRequest) -> o.SearchResponse: ...

    def note(self, request: o.NoteReadRequest) -> o.NoteResponse: ...

    def related(self, request: o.RelatedRequest) -> o.RelatedResponse: ...

    def mentions(self, request: o.MentionsRequest) -> o.MentionsResponse: ...

    def backlinks(self, request: o.BacklinksRequest) -> o.BacklinksResponse: ...

    def outline(self, request: o.OutlineRequest) -> o.OutlineResponse: ...

    def tags(self, request: o.TagsRequest) -> o.TagsResponse: ...

    def recent(self, request: o.RecentRequest) -> o.RecentResponse: ...

    def export(self, request: o.ExportRequest) -> Iterator[o.ExportRecord]: ...


class Service(Reads, Protocol):
    """A running daemon: the reads, and what only it can do."""

    def health(self, request: o.HealthRequest) -> o.HealthResponse: ...

    def status(self, request: o.StatusRequest) -> o.StatusResponse: ...

    def reindex(self, request: o.ReindexRequest) -> o.ReindexResponse: ...

    def events(self, request: o.EventsRequest) -> AsyncIterator[o.Event]:
        """What the daemon does, as it happens, awaited on the server's event loop until the
        iterator is closed (which ends the reader's subscription); a `ping` on a quiet stream."""
        ...

    async def until(self, target: str, timeout: float) -> bool:
        """Return once `target` (a vault path, or "idle") is indexed; False on timeout. The
        long poll of a search's `wait_for`, awaited on the server's event loop: it holds no
        thread while it waits."""
        ...
