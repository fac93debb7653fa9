"""A PDF's text layer becomes a `Note`, page by page (pypdfium2: see bench/quality/pdf_extract.py).

- Each page with text is a passage of its own with its page (`page` = `page_end`, 1-based);
  the chunker cuts a long page into line windows that keep it. Pages without text add nothing.
- Where the PDF has an outline (bookmarks), a page's heading path is the outline entries in
  force on it: the last entry starting at or before the page, under its parents.
- The title is the file name without `.pdf` (what `![[file.pdf#page=3]]` names).
- Only the first `max_pages` pages are read (`[attachments] max_pages`): a 1.2 MB file whose
  page tree names one page 200,000 times would otherwise be 200,000 passages. The rest are
  named in `Note.errors`, so the PDF is indexed in part and `status` says so.

`read` runs in a child process (`python -m vaultd.pipeline.pdf`, see vaultd.isolation): PDFium
is native code reading a hostile format. A file that cannot be read is left out with its
reason (`LeftOutError`): not a PDF, damaged or truncated, encrypted with a password, or with
no text layer (pictures only, such as a scan: `ocr = true` is for those).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from vaultd.errors import LeftOutError
from vaultd.records import Block, Location, Note, lay_out

#: Fewer characters than this (not counting white space) in the whole file: no text layer.
MIN_TEXT_CHARS = 16
#: Outline entries read at most, and how deep: a hostile outline can be a loop or enormous.
MAX_OUTLINE = 10_000
MAX_OUTLINE_DEPTH = 8
#: Pages read of one PDF by default (`[attachments] max_pages`).
DEFAULT_MAX_PAGES = 5_000


def read(data: bytes, path: str = "", max_pages: int = DEFAULT_MAX_PAGES) -> dict[str, Any]:
    """The text of each of the first `max_pages` pages and the outline: {"pages": [...],
    "outline": [[level, title, page index], ...], "total_pages": the PDF's page count}.
    Raises LeftOutError for a file that is not a readable PDF with text."""
    import pypdfium2 as pdfium  # in the child only: the daemon never loads PDFium
    import pypdfium2.raw as pdfium_c

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise LeftOutError(
                path, "encrypted: it opens only with a password", "encrypted"
            ) from exc
        if b"%PDF-" not in data[:1024]:
            raise LeftOutError(path, "not a PDF file (no %PDF header)", "damaged") from exc
        raise LeftOutError(path, f"damaged or truncated PDF ({exc})", "damaged") from exc
    try:
        pages: list[str] = []
        total = len(document)
        for index in range(min(total, max_pages)):
            page = document[index]
            try:
                textpage = page.get_textpage()
                try:
                    pages.append(_clean(textpage.get_text_range()))
                finally:
                    textpage.close()
            finally:
                page.close()
        outline: list[list[Any]] = []
        for mark in document.get_toc(max_depth=MAX_OUTLINE_DEPTH):
            dest = mark.get_dest()
            outline.append([mark.level, mark.get_title(), dest.get_index() if dest else None])
            if len(outline) >= MAX_OUTLINE:
                break
    finally:
        document.close()
    if sum(len("".join(text.split())) for text in pages) < MIN_TEXT_CHARS:
        raise LeftOutError(
            path, "no text layer (its pages are pictures; `ocr = true` reads them)", "no_text"
        )
    return {"pages": pages, "outline": outline, "total_pages": total}


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    # PDFium marks a line-end hyphen it kept as U+0002 and a soft one as U+FFFE.
    text = text.replace("\x02", "-").replace("\ufffe", "")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def note_of(path: str, found: Mapping[str, Any]) -> Note:
    """The note made of what `read` found in the PDF at vault path `path`; "errors" (pages
    OCR could not read, see vaultd.index.extract) are the note's."""
    path = unicodedata.normalize("NFC", path)
    pages: Sequence[str] = found["pages"]
    paths = _heading_paths(len(pages), found.get("outline") or [])
    blocks = [
        Block(
            kind="paragraph",
            start_line=0,
            end_line=0,
            text=text,
            location=Location(page=number, page_end=number),
            headings=paths[number - 1],
        )
        for number, text in enumerate(pages, 1)
        if text.strip()
    ]
    body, laid = lay_out(blocks)
    errors = tuple(str(error) for error in found.get("errors") or ())
    total = int(found.get("total_pages") or len(pages))
    if total > len(pages):
        errors += (f"only the first {len(pages)} of its {total} pages are indexed (max_pages)",)
    return Note(
        path=path,
        title=PurePosixPath(path).stem,
        body=body,
        blocks=laid,
        kind="pdf",
        errors=errors,
    )


def extract(path: str, data: bytes, *, max_pages: int = DEFAULT_MAX_PAGES) -> Note:
    """The PDF read in this process (for `vaultd inspect` and benchmarks; the indexer reads
    PDFs in a child process)."""
    return note_of(path, read(data, path, max_pages))


def _heading_paths(pages: int, outline: Sequence[Sequence[Any]]) -> list[tuple[str, ...]]:
    """Each page's heading path from the outline: the entries started on or before it."""
    marks = [
        (int(index), n, int(level), str(title).strip())
        for n, (level, title, index) in enumerate(outline)
        if isinstance(index, int) and 0 <= index < pages and str(title).strip()
    ]
    marks.sort()
    stack: list[tuple[int, str]] = []
    paths: list[tuple[str, ...]] = []
    at = 0
    for page in range(pages):
        while at < len(marks) and marks[at][0] <= page:
            _, _, level, title = marks[at]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            at += 1
        paths.append(tuple(title for _, title in stack))
    return paths


def _serve() -> None:
    """The worker `run_child` starts: `python -m vaultd.pipeline.pdf MEMORY_MB [MAX_PAGES]`."""
    import sys
    from functools import partial

    from vaultd.isolation import child_main

    max_pages = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MAX_PAGES
    child_main(partial(read, max_pages=max_pages))


if __name__ == "__main__":
    _serve()
