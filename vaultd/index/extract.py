"""Which extractor reads a file, and how: the one place the kinds of file meet.

A file's kind comes from its name (`records.kind_of`) or, for source code, the `[attachments]
code` globs. A Markdown note goes to `pipeline/parse.py`, a canvas to `pipeline/canvas.py`, a
drawing to `pipeline/excalidraw.py`, source code to `pipeline/code.py` (tree-sitter), each in
this process. A PDF is read by `pipeline/pdf.py`, and an image by `pipeline/ocr.py` (after its
header passed the size limits), in a worker process with the configured time and memory limits
(`vaultd.isolation`), since PDFium and the OCR engine are native code reading a hostile format;
only the text comes back, and the note is made here. With `ocr = true`, a PDF's pages without
a text layer are read by the OCR worker too. Images without the `ocr` extra are left out with
that reason, never silently dropped. Stages never import one another:
what one needs of another (the link syntax of a canvas card's Markdown) is passed in here.

Every note leaves here with valid text (`valid_text`): a lone UTF-16 surrogate, which JSON
(`"\\ud800"` in a canvas card or a drawing) and YAML escapes can spell and PDF text layers
can hold, becomes U+FFFD, as Obsidian shows it. Left in, the tokenizer and SQLite refuse the
whole note.

Each kind has a cap besides its size (`[attachments] max_pages`, `max_cards`): past it the
extractor reads no further and names what it left in the note's errors, so the file is indexed
in part and `status` says why. A small file can name one PDF page 200,000 times.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from typing import Any, TypeVar

import pathspec

from vaultd.config import AttachmentsSection, ChunkingSection, parse_duration
from vaultd.errors import LeftOutError
from vaultd.isolation import run_child
from vaultd.pipeline import canvas, code, excalidraw, ocr, pdf
from vaultd.pipeline.chunk import DEFAULT_MAX_CHUNKS, DEFAULT_MAX_TOKENS, Counter
from vaultd.pipeline.parse import DEFAULT_MAX_BYTES, check_size, links_in, parse_note
from vaultd.records import Note, NoteKind, kind_of

T = TypeVar("T")

#: The module run as the child that reads a PDF.
PDF_CHILD = "vaultd.pipeline.pdf"
#: The module run as the child that reads the text in an image (or a PDF's pages by OCR).
OCR_CHILD = "vaultd.pipeline.ocr"


@dataclass(frozen=True, slots=True)
class Extraction:
    """How files are read: the code globs that make a file source code, and the extraction
    worker's limits. Small and picklable: the parser workers get a copy."""

    code: tuple[str, ...] = ()
    timeout: float = 60.0
    memory_mb: int = 1024
    #: `[attachments] ocr`: images, and PDF pages without a text layer, are read by OCR.
    ocr_on: bool = False
    max_image_bytes: int = ocr.DEFAULT_MAX_BYTES
    max_image_pixels: int = ocr.DEFAULT_MAX_PIXELS
    #: Caps per file past which it is indexed in part (see the module's docstring): a PDF's
    #: pages, a canvas's nodes and edges, any file's chunks.
    max_pages: int = pdf.DEFAULT_MAX_PAGES
    max_cards: int = canvas.DEFAULT_MAX_CARDS
    max_chunks: int = DEFAULT_MAX_CHUNKS

    @classmethod
    def from_config(
        cls, attachments: AttachmentsSection, chunking: ChunkingSection | None = None
    ) -> Extraction:
        chunking = chunking or ChunkingSection()
        return cls(
            code=attachments.code,
            timeout=parse_duration(attachments.extract_timeout) or 60.0,
            memory_mb=attachments.extract_memory_mb,
            ocr_on=attachments.ocr,
            max_image_bytes=int(attachments.max_image_mb * 1048576),
            max_image_pixels=int(attachments.max_image_megapixels * 1e6),
            max_pages=attachments.max_pages,
            max_cards=attachments.max_cards,
            max_chunks=chunking.max_chunks,
        )

    @property
    def ocr_memory_mb(self) -> int:
        """The OCR worker's limit: the engine alone needs most of the default one."""
        return max(self.memory_mb, ocr.MIN_WORKER_MB)

    def kind(self, path: str) -> NoteKind:
        """The kind of the file at vault path `path` (a file of no known kind is read as a
        note: the discovery admits only kinds it indexes)."""
        kind = kind_of(path)
        if kind is None and self.code and _spec(self.code).match_file(path):
            return "code"
        return kind or "note"


def _spec(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(globs)


def extract_note(
    path: str,
    data: bytes,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    extraction: Extraction | None = None,
    isolated: bool = True,
    counter: Counter | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> Note:
    """The note the file at `path` with bytes `data` makes, by its kind. Raises NoteError
    (LeftOutError for a file that is no indexable input). `isolated=False` reads a PDF in this
    process (for `vaultd inspect` of one file the user names, and for benchmarks)."""
    extraction = extraction or Extraction()
    note = _extracted(
        path,
        data,
        max_bytes=max_bytes,
        extraction=extraction,
        isolated=isolated,
        counter=counter,
        max_tokens=max_tokens,
    )
    return valid_text(note)


def _extracted(
    path: str,
    data: bytes,
    *,
    max_bytes: int,
    extraction: Extraction,
    isolated: bool,
    counter: Counter | None,
    max_tokens: int,
) -> Note:
    kind = extraction.kind(path)
    if kind == "note":
        return parse_note(path, data, max_bytes=max_bytes)
    if kind == "canvas":
        check_size(path, data, max_bytes)  # a JSON file is read whole
        return canvas.extract(path, data, links_in=links_in, max_cards=extraction.max_cards)
    if kind == "excalidraw":
        check_size(path, data, max_bytes)  # a JSON file is read whole
        return excalidraw.extract(path, data, links_in=links_in)
    if kind == "pdf":
        if not isolated:
            return pdf.extract(path, data, max_pages=extraction.max_pages)
        return pdf.note_of(path, read_pdf(path, data, extraction))
    if kind == "code":
        return code.extract(path, data, counter=counter, max_tokens=max_tokens, max_bytes=max_bytes)
    if kind == "image":
        # The header decides, before any pixel is decoded; then the worker reads it.
        limits = {
            "max_pixels": extraction.max_image_pixels,
            "max_bytes": extraction.max_image_bytes,
        }
        ocr.check(path, data, **limits)
        if not ocr.available():
            raise LeftOutError(path, f"{ocr.NEEDS_EXTRA}; skipped", "no_text")
        if not isolated:
            return ocr.extract(path, data, **limits)
        return ocr.note_of(path, _read_by_ocr(path, data, extraction))
    raise LeftOutError(path, f"no extractor for {kind} files in this build; skipped", "no_text")


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(note: Note) -> Note:
    """The note with every lone surrogate in its text (and its title, front matter, links...)
    made U+FFFD; a pair of surrogates becomes the character it spells. A note without one
    is returned as it is."""
    return _valid(note)


def _valid(value: T) -> T:
    if isinstance(value, str):
        if _SURROGATE.search(value) is None:
            return value
        fixed = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return fixed  # type: ignore[return-value]
    if isinstance(value, tuple | list):
        items = [_valid(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    if isinstance(value, dict):
        pairs = [(_valid(k), _valid(v)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _valid(old)
            if new is not old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value


def turned_off(kind: str) -> str:
    """Why a file of this kind is not indexed with the config as it is."""
    if kind == "image":
        return "images are not indexed: [attachments] ocr = false"
    if kind in ("pdf", "canvas"):
        return f"files of this kind are not indexed: [attachments] {kind} = false"
    return f"files of this kind ({kind}) are not indexed"


def read_pdf(path: str, data: bytes, extraction: Extraction) -> dict[str, Any]:
    """What the PDF at `path` holds, read in the worker: {"pages": [every page's text],
    "outline": [...]}, with OCR's text on pages without a text layer when `ocr` is on. Raises
    LeftOutError as `pdf.read` does."""
    try:
        found = run_child(
            PDF_CHILD,
            path,
            data,
            timeout=extraction.timeout,
            memory_mb=extraction.memory_mb,
            args=(str(extraction.max_pages),),
        )
    except LeftOutError as exc:
        if exc.kind != "no_text" or not (extraction.ocr_on and ocr.available()):
            raise
        found = {"pages": [], "outline": []}
    if extraction.ocr_on and ocr.available():
        found = _with_ocr(path, data, found, extraction)
    return found


def _with_ocr(
    path: str, data: bytes, found: dict[str, Any], extraction: Extraction
) -> dict[str, Any]:
    """A PDF's pages with the text OCR reads on those without a text layer, in the worker.

    Pages OCR could not read are left out of the note, not the PDF: they are named, with
    why, in its "errors" (the note's, reported as a partial failure). Only a PDF that has no
    text but OCR's is left out whole, with the reason its pages could not be read."""
    pages: list[str] = list(found["pages"])
    wanted = [n for n, p in enumerate(pages, 1) if len("".join(p.split())) < ocr.PAGE_TEXT_CHARS]
    if pages and not wanted:
        return found
    has_text = any(text.strip() for text in pages)
    try:
        answer = _read_by_ocr(path, data, extraction)
    except LeftOutError as exc:  # the worker timed out, was killed or crashed on the file
        if not has_text:
            raise
        reason = exc.reason.removesuffix("; skipped")
        return {**found, "errors": [f"{_named(wanted)} not read by OCR: {reason}"]}
    seen = answer["pages"][: extraction.max_pages]
    merged = [
        own if text is None else text
        for own, text in itertools.zip_longest(pages, seen, fillvalue="")
    ]
    failed: list[list[Any]] = answer.get("failed") or []
    if not any(text.strip() for text in merged):
        if failed:
            _, kind, reason = failed[0]
            raise LeftOutError(path, f"no text layer, and OCR failed: {reason}; skipped", kind)
        raise LeftOutError(path, "no text layer, and OCR reads no text on its pages", "no_text")
    by_reason: dict[str, list[int]] = {}
    for page, _kind, reason in failed:
        by_reason.setdefault(str(reason), []).append(int(page))
    errors = [f"{_named(numbers)} not read by OCR: {why}" for why, numbers in by_reason.items()]
    return {**found, "pages": merged, "errors": errors}


def _read_by_ocr(path: str, data: bytes, extraction: Extraction) -> dict[str, Any]:
    """The OCR worker's answer for an image or a PDF; a PDF's pages are rendered within the
    pixel limit an image has, and only its first `max_pages` are read, the worker told both
    on its command line."""
    return run_child(
        OCR_CHILD,
        path,
        data,
        timeout=extraction.timeout,
        memory_mb=extraction.ocr_memory_mb,
        args=(str(extraction.max_image_pixels), str(extraction.max_pages)),
    )


def _named(pages: list[int]) -> str:
    """Page numbers, ascending, as a reason names them: "page 4", "pages 4, 16 and 20-26"."""
    runs: list[list[int]] = []
    for page in pages:
        if runs and page == runs[-1][-1] + 1:
            runs[-1].append(page)
        else:
            runs.append([page])
    if len(runs) == 1 and len(runs[0]) == 1:
        return f"page {pages[0]}"
    named = [str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs]
    if len(named) == 1:
        return f"pages {named[0]}"
    return f"pages {', '.join(named[:-1])} and {named[-1]}"
