"""Text in images: PNG, JPEG and WebP files, and rendered PDF pages with no text layer.

The engine is RapidOCR (`rapidocr-onnxruntime`, the `ocr` extra): PP-OCRv4's detection and
recognition models as ONNX files inside its wheel, run by onnxruntime; nothing is fetched at
run time. Rules (also in docs/parsing.md):
- An image's size is read from its header before anything is decoded: one over
  `max_pixels` or `max_bytes` is left out with its reason, so a 20,000 x 20,000 PNG (1.2 GB
  decoded) never reaches memory.
- Transparent pixels are laid on white (screenshots are often dark text on nothing) and a
  palette image is expanded to its colours before recognition.
- The recognised boxes are read as a page is: rows top to bottom (boxes whose middles share a
  band are one row, left to right), and a gap taller than a row starts a new block. A block's
  line range is its rows' in the recognised text, which is the note's body.
"""

from __future__ import annotations

import importlib.util
import math
import os
import struct
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from io import BytesIO
from pathlib import PurePosixPath
from typing import Any

from vaultd.errors import LeftOutError, NoteError
from vaultd.isolation import failure
from vaultd.records import Block, Note, lay_out

#: 40 megapixels, `[attachments] max_image_megapixels`'s default: a 7,300 x 5,500 photo, a
#: 5K screenshot four times over; 120 MB decoded.
DEFAULT_MAX_PIXELS = 40_000_000
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
#: Two threads where there are two cores: a first index reads its images one at a time and
#: waits for each, and with one thread a core stood idle meanwhile (on issue 39's test vault OCR
#: was 64% of the first index's wall time with one thread, 49% with two). The governor counts
#: the worker's CPU time, not its threads, so the budget holds either way.
DEFAULT_THREADS = min(2, os.cpu_count() or 1)
#: Text boxes recognised one at a time. In a batch (RapidOCR's default is 6) every box is
#: padded to the widest one's shape, and the padding changes what PP-OCRv4's recogniser reads:
#: on issue 39's 48 screenshots batches of 6 ran 87 pairs of words together ("withBacklinks",
#: "Currentversion"), which the keyword index then holds as one word, where one at a time
#: reads them apart and reads no word less; and it is a fifth less recognition time, the
#: padding never computed (docs/benchmarks.md, "Extraction and OCR in a first index").
REC_BATCH = 1
#: The least address space the OCR worker is given, whatever `extract_memory_mb` says: the
#: engine's libraries, models and buffers take 0.7-0.8 GB of it before the first image, and a
#: 3,324 x 2,008 screenshot 1.2 GB in all (0.55 GB resident) with one thread. A second thread
#: reserves more (with 2 GB, 9 of obsidian-help's 48 screenshots ran out of it); this is address
#: space, not resident memory, which stays far below the unit's MemoryHigh.
MIN_WORKER_MB = 3072
EXTENSIONS = (".png", ".jpg", ".jpeg", ".webp")
#: A PDF page with fewer characters than this in its own text layer is read as a picture.
PAGE_TEXT_CHARS = 16
#: Pages are rendered at 144 dpi (PDF counts 72 points an inch): body text comes out about
#: 20 pixels high, which the detector finds without the upscaling a smaller render needs.
RENDER_SCALE = 2.0


#: Why an image is not read without the extra.
NEEDS_EXTRA = "text in images needs the ocr extra: pip install 'vaultd-obsidian[ocr]'"


class OcrUnavailableError(NoteError):
    """Raised when `ocr = true` but the `ocr` extra (rapidocr-onnxruntime) is not installed."""


def available() -> bool:
    """Whether the engine is installed (without importing it: that takes a second)."""
    return importlib.util.find_spec("rapidocr_onnxruntime") is not None


@dataclass(frozen=True, slots=True)
class ImageHeader:
    """What an image's first bytes say: its format and size in pixels."""

    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def read_header(data: bytes) -> ImageHeader | None:
    """The format and dimensions of a PNG, JPEG or WebP, from its header alone; None for
    anything else (or a header too damaged to say)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return ImageHeader("png", width, height)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_header(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_header(data)
    return None


def _jpeg_header(data: bytes) -> ImageHeader | None:
    # Markers up to the first start-of-frame, which holds the size; each has a 2-byte length.
    at = 2
    while at + 9 < len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:
            at += 1  # fill byte
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return ImageHeader("jpeg", width, height)
        at += 2 + length
    return None


def _webp_header(data: bytes) -> ImageHeader | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return ImageHeader("webp", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and len(data) >= 25:
        (bits,) = struct.unpack("<I", data[21:25])
        return ImageHeader("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return ImageHeader("webp", width, height)
    return None


def check(
    path: str,
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ImageHeader:
    """The image's header, or `LeftOutError` for a file that is no image vaultd reads or is
    too big for it. Decodes nothing: discovery and `inspect` can call it without the extra."""
    if len(data) > max_bytes:
        raise LeftOutError(
            path,
            f"{len(data) / 1048576:.1f} MiB is over the {max_bytes / 1048576:.0f} MiB limit "
            "for images; skipped",
            "too_big",
        )
    header = read_header(data)
    if header is None:
        raise LeftOutError(path, "not a PNG, JPEG or WebP image; skipped", "unreadable")
    if header.pixels > max_pixels:
        raise LeftOutError(
            path,
            f"{header.width} x {header.height} pixels is over the {max_pixels / 1e6:g} "
            "megapixel limit for images; skipped",
            "too_big",
        )
    return header


@contextmanager
def memory_arenas() -> Iterator[None]:
    """RapidOCR builds its onnxruntime sessions with the memory arena off, so every run
    allocates its tensors afresh: for a screenshot's detection, hundreds of MB mapped and
    zeroed by the kernel each time. With the arena on, the same models give the same text in
    a fifth less CPU time (issue 39's 48 screenshots: detection 35 s against 21 s).
    onnxruntime's memory patterns stay off: they plan one block per input shape, and with
    every image a new shape the arena kept each one (the worker grew to 1.3 GB resident over
    the 48); without them it peaks where it did without the arena, 1.05 GB, at no cost in
    speed. RapidOCR 1.4.4 (pinned) has no setting for either: its sessions' options are
    amended while an engine is built."""
    from rapidocr_onnxruntime.utils import infer_engine

    session = infer_engine.OrtInferSession
    plain = session._init_sess_opts

    def with_arena(config: dict[str, Any]) -> Any:
        options = plain(config)
        options.enable_cpu_mem_arena = True
        options.enable_mem_pattern = False
        return options

    session._init_sess_opts = staticmethod(with_arena)
    try:
        yield
    finally:
        session._init_sess_opts = staticmethod(plain)


@cache
def _engine(threads: int) -> Any:
    if not available():
        raise OcrUnavailableError(NEEDS_EXTRA)
    # Any other ImportError is the engine failing to load (out of memory in the worker, say).
    from rapidocr_onnxruntime import RapidOCR

    # The wheel's own models (its config.yaml names files inside the package).
    with memory_arenas():
        return RapidOCR(
            intra_op_num_threads=threads, inter_op_num_threads=1, rec_batch_num=REC_BATCH
        )


def engine(threads: int = DEFAULT_THREADS) -> Any:
    """The process's OCR engine, loaded once (about half a second); `OcrUnavailableError`
    without the extra."""
    return _engine(threads)


def _pixels(image: Any) -> Any:
    """An image (encoded bytes, a PIL image or an RGB array) as the BGR array RapidOCR reads."""
    import numpy as np
    from PIL import Image

    if isinstance(image, bytes | bytearray):
        image = Image.open(BytesIO(image))
        image.load()
    if isinstance(image, Image.Image):
        if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
            rgba = image.convert("RGBA")
            canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            image = Image.alpha_composite(canvas, rgba)
        image = np.asarray(image.convert("RGB"))
    array = np.asarray(image)
    if array.ndim == 2:
        array = np.stack([array] * 3, axis=-1)
    # RGB to BGR, contiguous for OpenCV.
    return np.ascontiguousarray(array[:, :, 2::-1])


def read_rows(image: Any, *, threads: int = DEFAULT_THREADS) -> list[tuple[str, float, float]]:
    """The text rows of an image (bytes, PIL image or RGB array), top to bottom, each with its
    top and bottom in pixels. For a rendered PDF page without a text layer as for a file."""
    pixels = _pixels(image)  # a damaged file fails here, before the models load
    result, _ = engine(threads)(pixels)
    return _rows(result or [])


def page_text(image: Any, *, threads: int = DEFAULT_THREADS) -> str:
    """The text of a rendered page (a PIL image or an RGB array), a row per line."""
    return "\n".join(text for text, _, _ in read_rows(image, threads=threads))


def _rows(result: Sequence[Any]) -> list[tuple[str, float, float]]:
    boxes = []
    for box, text, _score in result:
        ys = [point[1] for point in box]
        xs = [point[0] for point in box]
        boxes.append((min(ys), max(ys), min(xs), str(text).strip()))
    boxes.sort()
    rows: list[tuple[float, float, list[tuple[float, str]]]] = []
    for top, bottom, left, text in boxes:
        if not text:
            continue
        middle = (top + bottom) / 2
        if rows and rows[-1][0] <= middle <= rows[-1][1]:
            row_top, row_bottom, items = rows[-1]
            items.append((left, text))
            rows[-1] = (row_top, max(row_bottom, bottom), items)
        else:
            rows.append((top, bottom, [(left, text)]))
    return [(" ".join(t for _, t in sorted(items)), top, bottom) for top, bottom, items in rows]


def read(data: bytes, *, threads: int = DEFAULT_THREADS) -> dict[str, Any]:
    """What the engine finds in an image's bytes, as JSON: its text rows, each with its top
    and bottom in pixels. What the extraction worker (a child process) answers; call `check`
    first, in the parent, which decodes nothing."""
    rows = read_rows(data, threads=threads)
    return {"rows": [[text, top, bottom] for text, top, bottom in rows]}


def read_pdf(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    threads: int = DEFAULT_THREADS,
    max_pages: int | None = None,
) -> dict[str, Any]:
    """The text OCR reads on each page of a PDF that has no text layer of its own:
    {"pages": [text, or None for a page with its own text, ...], "failed": [[page, kind,
    reason], ...]}. Each such page is rendered at `RENDER_SCALE` (less for a page so big it
    would pass `max_pixels`). A page OCR fails on (out of memory, the engine's error) is a
    page of no text, listed in "failed" with the kind and reason of `isolation.failure`:
    one page costs that page, never the other pages or the PDF's text layer. Only the first
    `max_pages` pages are looked at (all when None): a page tree may name one page 200,000
    times."""
    import pypdfium2 as pdfium  # in the extraction worker only, as for the text layer

    document = pdfium.PdfDocument(data)
    pages: list[str | None] = []
    failed: list[list[Any]] = []
    try:
        count = len(document) if max_pages is None else min(len(document), max_pages)
        for index in range(count):
            page = document[index]
            try:
                textpage = page.get_textpage()
                try:
                    own = textpage.get_text_range()
                finally:
                    textpage.close()
                if len("".join(own.split())) >= PAGE_TEXT_CHARS:
                    pages.append(None)
                    continue
                width, height = page.get_size()
                scale = min(RENDER_SCALE, math.sqrt(max_pixels / max(1.0, width * height)))
                try:
                    image = page.render(scale=scale).to_pil()
                    pages.append(page_text(image, threads=threads))
                except OcrUnavailableError:
                    raise
                except Exception as exc:
                    kind, reason = failure(exc)
                    pages.append("")
                    failed.append([index + 1, kind, reason])
            finally:
                page.close()
    finally:
        document.close()
    return {"pages": pages, "failed": failed}


def read_any(
    data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS, max_pages: int | None = None
) -> dict[str, Any]:
    """The extraction worker's request: the first `max_pages` pages of a PDF without a text
    layer, each rendered within `max_pixels`, or an image (whose header the parent has
    checked)."""
    if b"%PDF-" in data[:1024]:
        return read_pdf(data, max_pixels=max_pixels, max_pages=max_pages)
    return read(data)


def note_of(path: str, found: Mapping[str, Any]) -> Note:
    """The note made of what `read` found in the image at vault path `path`: a block for
    each run of rows with no gap taller than a row between them."""
    path = unicodedata.normalize("NFC", path)
    rows: Sequence[Sequence[Any]] = found["rows"]
    blocks: list[Block] = []
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][1] - rows[i - 1][2] > rows[i - 1][2] - rows[i - 1][1]:
            text = "\n".join(str(row[0]) for row in rows[start:i])
            blocks.append(Block("paragraph", 0, 0, text))
            start = i
    body, laid = lay_out(blocks)
    return Note(path=path, title=PurePosixPath(path).stem, body=body, blocks=laid, kind="image")


def extract(
    path: str,
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    threads: int = DEFAULT_THREADS,
) -> Note:
    """An image's text as a note, read in this process (the indexer reads images in a child
    process: `check` here, then `read` there, then `note_of`). Raises `LeftOutError` for a
    file too big or no image, `OcrUnavailableError` without the extra, and `NoteError` for
    one the engine fails on."""
    header = check(path, data, max_pixels=max_pixels, max_bytes=max_bytes)
    try:
        found = read(data, threads=threads)
    except NoteError:
        raise
    except Exception as exc:  # a damaged image costs one file, never the run
        raise NoteError(
            f"{path}: cannot read the {header.format} image ({type(exc).__name__}: {exc}); skipped"
        ) from exc
    return note_of(path, found)


if __name__ == "__main__":
    import os

    # The worker's address space is limited, and OpenBLAS reserves a buffer for each core
    # when numpy loads: a quarter of a GB that OCR never touches.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import sys
    from functools import partial

    from vaultd.isolation import child_main

    # `[attachments] max_image_megapixels`, as pixels, follows the memory limit (extract.py).
    pixels = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MAX_PIXELS
    # `[attachments] max_pages`: a PDF's pages past it are not looked at.
    pages = int(sys.argv[3]) if len(sys.argv) > 3 else None
    child_main(partial(read_any, max_pixels=pixels, max_pages=pages))
