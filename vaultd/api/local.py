"""The reads of the API over an open index (vaultd.index.open.Index): the code the daemon
serves from, and what the CLI and the MCP bridge answer with when no daemon runs.

Each method takes an operation's request model, already checked, and returns its response
model (vaultd.api.operations). A note asked for by name is resolved as Obsidian resolves it; one
that is not indexed raises NoteUnavailableError (404 on the socket).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from http import HTTPStatus
from typing import TYPE_CHECKING

from vaultd.api import operations as o
from vaultd.errors import (
    ApiError,
    LeftOutError,
    NoteError,
    NoteNotIndexedError,
    NoteUnavailableError,
)
from vaultd.index import browse
from vaultd.index.backlinks import backlinks_of
from vaultd.index.exclusion import Exclusion
from vaultd.index.export import export_records
from vaultd.index.mentions import unlinked_mentions
from vaultd.index.names import note_named
from vaultd.index.notes import note_view
from vaultd.records import Block, Note

#: The kinds read as the text the indexer extracts from them, not as their file.
EXTRACTED = ("canvas", "excalidraw", "image")

if TYPE_CHECKING:
    from vaultd.index.open import Index


class LocalService:
    """`vaultd.api.service.Reads` over an open index."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.vault = index.vault
        self.data_dir = index.data_dir

    def find_note(self, name: str) -> str:
        """The indexed note a name means (see vaultd.index.names)."""
        found = note_named(self.index.manifest, name)
        if found is None:
            raise NoteNotIndexedError(name)
        return found

    def search(self, request: o.SearchRequest) -> o.SearchResponse:
        result = self.index.searcher.search(request.asked)
        if not request.explain:  # the score parts only when asked for
            result = replace(result, hits=tuple(replace(h, parts={}) for h in result.hits))
        return o.SearchResponse.model_validate(result, from_attributes=True)

    def note(self, request: o.NoteReadRequest) -> o.NoteResponse:
        try:
            path = self.find_note(request.path)
        except NoteNotIndexedError:
            from vaultd.index.extract import turned_off

            # An image while `ocr` is off, say: why it is not indexed, not just that it is not.
            kind = self.index.indexer.settings.extraction.kind(request.path)
            if kind in self.index.config.attachments.kinds():
                raise
            raise NoteUnavailableError(request.path, turned_off(kind), "excluded") from None
        view = note_view(self.index.manifest, path)
        if view is None:
            raise NoteNotIndexedError(path)
        pages = (request.start_page, request.end_page)
        # By its name: a file left out has no kind in the manifest.
        kind = self.index.indexer.settings.extraction.kind(path)
        if request.text and kind == "pdf":
            if request.start_line is not None or request.end_line is not None:
                raise ApiError(
                    HTTPStatus.BAD_REQUEST,
                    "bad_range",
                    f"{path} is a PDF, read by pages: ask for start_page and end_page",
                )
            view.update(self._pages(path, *pages))
        elif request.text:
            if pages != (None, None):
                raise ApiError(
                    HTTPStatus.BAD_REQUEST,
                    "bad_range",
                    f"{path} is a {kind}, read by lines: pages are a PDF's",
                )
            view.update(self._text(path, kind, request.start_line, request.end_line))
        return o.NoteResponse.model_validate(view)

    def _pages(self, path: str, start: int | None, end: int | None) -> dict[str, object]:
        """The text of a PDF's pages as it is on disk now, read as the indexer reads it (in
        the extraction worker, with its limits), pages apart by a blank line."""
        from vaultd.index.extract import read_pdf

        try:
            data, _ = self.index.indexer.discovery.read_note(path)
            pages: list[str] = read_pdf(path, data, self.index.indexer.settings.extraction)["pages"]
        except OSError as exc:
            raise NoteUnavailableError(path, f"cannot read ({exc})") from None
        except LeftOutError as exc:
            raise NoteUnavailableError(path, exc.reason) from None
        first = start or 1
        last = min(end or len(pages), len(pages))
        if (end is not None and end < first) or first > max(len(pages), 1):
            raise ApiError(
                HTTPStatus.BAD_REQUEST,
                "bad_range",
                f"{path} has {len(pages)} pages; {first}..{end or 'the end'} is not a range "
                "of them",
            )
        return dict(
            text="\n\n".join(p for p in pages[first - 1 : last] if p.strip()),
            start_page=first,
            end_page=last,
            total_pages=len(pages),
        )

    def _text(self, path: str, kind: str, start: int | None, end: int | None) -> dict[str, object]:
        """The note's text as it is on disk now, or the lines asked for. Read as the indexer
        reads (Discovery.read_note): never through a symlink swapped in for the note or a
        folder above it, and only while the rules still admit it.

        A canvas, a drawing or an image is its text as extracted for the index (the lines its
        hits name), with each passage's card or element and group labels: its file is JSON,
        a compressed drawing or pixels, none of it what the assistant asked to read."""
        from vaultd.pipeline.parse import decode

        try:
            data, _ = self.index.indexer.discovery.read_note(path)
        except OSError as exc:
            raise NoteUnavailableError(path, f"cannot read ({exc})") from None
        blocks: list[Block] | None = None
        if kind in EXTRACTED:
            note = self._extracted(path, data)
            text, blocks = note.body, list(note.blocks)
        else:
            text, _ = decode(data, path)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline ends the last line; it does not start another
        first = start or 1
        last = min(end or len(lines), len(lines))
        if (end is not None and end < first) or first > max(len(lines), 1):
            raise ApiError(
                HTTPStatus.BAD_REQUEST,
                "bad_range",
                f"{path} has {len(lines)} lines; {first}..{end or 'the end'} is not a range "
                "of them",
            )
        out: dict[str, object] = {
            "text": "\n".join(lines[first - 1 : last]),
            "start_line": first,
            "end_line": last,
            "total_lines": len(lines),
        }
        if blocks is not None:
            out["blocks"] = [
                {
                    "start_line": b.start_line,
                    "end_line": b.end_line,
                    "node": b.location.node,
                    "headings": list(b.headings or ()),
                }
                for b in blocks
                if b.end_line >= first and b.start_line <= last
            ]
        return out

    def _extracted(self, path: str, data: bytes) -> Note:
        """What the indexer makes of the file's bytes now (an image read by OCR in the
        worker, with its limits); one it would leave out is unavailable with that reason."""
        from vaultd.index.extract import extract_note

        settings = self.index.indexer.settings
        try:
            note = extract_note(
                path, data, max_bytes=settings.max_bytes, extraction=settings.extraction
            )
        except LeftOutError as exc:
            raise NoteUnavailableError(path, exc.reason, "unreadable") from None
        if note.kind == "image" and not note.body.strip():
            raise NoteUnavailableError(path, "OCR reads no text in this image", "unreadable")
        return note

    def related(self, request: o.RelatedRequest) -> o.RelatedResponse:
        path = self.find_note(request.path)
        found = self.index.related.related(
            path,
            request.k,
            lines=request.lines,
            exclude_linked=request.exclude_linked,
            allowed=self.index.searcher.select(request.filters),
            how=request.how,
        )
        return o.RelatedResponse(path=path, related=found)

    def mentions(self, request: o.MentionsRequest) -> o.MentionsResponse:
        path = self.find_note(request.path)
        found = unlinked_mentions(self.index.manifest, path, request.k) or []
        return o.MentionsResponse(path=path, mentions=found)

    def backlinks(self, request: o.BacklinksRequest) -> o.BacklinksResponse:
        path = self.find_note(request.path)
        found = backlinks_of(self.index.manifest, path)[: request.k]
        answer = {"path": path, "backlinks": found}
        return o.BacklinksResponse.model_validate(answer, from_attributes=True)

    def outline(self, request: o.OutlineRequest) -> o.OutlineResponse:
        path = self.find_note(request.path)
        indexer = self.index.indexer
        kind = indexer.settings.extraction.kind(path)
        if kind != "note":
            # Its file is no Markdown (a PDF's bytes, a canvas's JSON, source code), and the
            # lines of its text as read are not its file's: headings read from it would mislead.
            raise NoteError(f"{path} is a {kind}, not a note: it has no outline; read its text")
        headings = browse.outline(indexer.discovery, path, indexer.settings.max_bytes)
        return o.OutlineResponse(path=path, headings=headings)

    def tags(self, request: o.TagsRequest) -> o.TagsResponse:
        return o.TagsResponse.model_validate(
            {"tags": browse.tags(self.index.manifest, request.prefix)}
        )

    def recent(self, request: o.RecentRequest) -> o.RecentResponse:
        notes = browse.recent(self.index.manifest, request.k, request.since_ns)
        return o.RecentResponse.model_validate({"notes": notes})

    def export(self, request: o.ExportRequest) -> Iterator[o.ExportRecord]:
        # `[mcp] exclude` holds for an export too (vaultd.index.export says why).
        exclusion = Exclusion.of(self.index.config.mcp.exclude)
        records = export_records(
            self.index.store, with_vectors=request.vectors, exclusion=exclusion
        )
        for record in records:
            yield o.ExportRecord.model_validate(record)
