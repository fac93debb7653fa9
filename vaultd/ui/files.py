"""The vault's own files for the page: an image a note embeds or a search found, and a PDF's
page drawn as a PNG. This module decides what may be served and makes the bytes; the server
(vaultd.ui.server) only routes to it.

A vault path means here what it means to the daemon, so the page never shows a file the
daemon would not read by that name:

- the path is taken by `vaultd.vaultpath` (no absolute path, `..`, NUL or empty name), and a
  backslash is refused too: browsers read one in a URL as a `/`;
- the daemon's ignore rules hold (`vaultd.pipeline.discover`): never a dot-file or a file in
  a dot-folder (`.obsidian/`, `.trash/`, `.git/`), nor `node_modules/`, editor temp files,
  what `.gitignore` or the user's `exclude` and `include` leave out;
- the file is opened as the daemon opens a note (`NoteReader.open_note`): one component at a
  time without following a symlink (unless `follow_symlinks`, and never out of the vault's
  real root), `O_NONBLOCK` so a FIFO cannot hang a request, then checked with `fstat` on the
  open descriptor (a regular file, no bigger than the cap), so nothing can be swapped in
  between the check and the read.

What is served must be what its name says: an image by its extension and by its first bytes
(a `.png` holding HTML is refused), a PDF by `.pdf` and `%PDF-`. PDFium reads a hostile
format in native code, so a page is drawn in a worker process with a time and a memory limit
(`vaultd.isolation`, as the indexer reads PDFs): `python -m vaultd.ui.files`, which imports
PDFium; the server's own process never does.

Errors: `VaultPathError` for a path that is not one; `NoteUnavailableError` for a file that
may not be served (kind "missing", "excluded", "link", "too_big" or "unreadable", as the
daemon's reader says); `LeftOutError` for one whose content is not what it claims or cannot
be drawn ("unreadable", "damaged", "encrypted", "too_costly"); `QueryError` (field "page")
for a page the PDF does not have.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import math
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from vaultd.errors import LeftOutError, NoteUnavailableError, QueryError, VaultPathError
from vaultd.isolation import run_child
from vaultd.pipeline.discover.reading import NoteReader
from vaultd.pipeline.discover.rules import CompiledRules, IgnoreRules
from vaultd.pipeline.ocr import read_header
from vaultd.records import NOTE_KINDS
from vaultd.vaultpath import vault_path

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: The largest file served (and the largest PDF drawn): 20 MB, the daemon's own image cap.
MAX_FILE_BYTES = 20 * 1024 * 1024
#: A PDF page is drawn at most this many pixels along its longer side.
MAX_PAGE_PIXELS = 1600
#: And at most this many pixels in all (12 MB of RGB): a page declared 10,000 inches wide
#: is drawn small, not in gigabytes.
MAX_PAGE_AREA = 4_000_000
#: The drawing worker's limits: a page that takes longer or more address space is refused.
RENDER_TIMEOUT_S = 20.0
RENDER_MEMORY_MB = 1024
#: The worker's module (this one).
RENDER_MODULE = "vaultd.ui.files"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The image endings served, each with the type it is served as when its bytes agree.
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".bmp": "image/bmp",
    ".avif": "image/avif",
    ".svg": "image/svg+xml",
}
SVG_TYPE = "image/svg+xml"
#: How far into an SVG its root element is looked for (past a BOM, an XML declaration,
#: comments and a doctype, which may hold entity declarations).
SVG_PROLOG_CHARS = 64 * 1024
#: The header sizes a BMP's DIB header can have (BITMAPCOREHEADER to BITMAPV5HEADER).
_BMP_HEADERS = {12, 40, 52, 56, 64, 108, 124}
_SVG_ROOT = re.compile(r"<svg[\s/>]")
_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Served:
    """What the server sends: the file's bytes and their Content-Type."""

    body: bytes
    content_type: str


def vault_file(
    vault: Path,
    relative: str,
    *,
    max_bytes: int = MAX_FILE_BYTES,
    rules: IgnoreRules | None = None,
) -> Served:
    """An image of the vault (by its vault-relative path, '/' separated, as the daemon's API
    names files) for the page to show; raises on anything else.

    PNG, JPEG, GIF, WebP, BMP and AVIF are served when the ending and the first bytes both
    say raster image, as the type the bytes say (a JPEG saved as `.png` is image/jpeg). An
    SVG is served as image/svg+xml when its root element is `<svg>`: it may hold script,
    which runs if the SVG is opened on its own, so the server must send it with
    `Content-Security-Policy: sandbox` (an `<img>` never runs it).

    `rules`: the vault's `[vault]` rules (`IgnoreRules.from_config(config.vault)`), so the
    user's exclude globs and `follow_symlinks` hold; the daemon's defaults without them.
    """
    rel = _path_of(relative)
    suffix = PurePosixPath(rel).suffix.lower()
    if suffix not in IMAGE_TYPES:
        shown = ", ".join(IMAGE_TYPES)
        raise NoteUnavailableError(
            rel, f"not an image the page shows ({shown}); open it from the vault", "excluded"
        )
    data = _read(vault, rel, max_bytes, rules)
    if suffix == ".svg":
        if not is_svg(data):
            raise LeftOutError(
                rel,
                "named .svg, but it is no SVG image (its root element is not <svg>); "
                "open it from the vault to see what it is",
                "unreadable",
            )
        return Served(data, SVG_TYPE)
    found = raster_type(data)
    if found is None:
        raise LeftOutError(
            rel,
            f"named {suffix}, but its first bytes are no PNG, JPEG, GIF, WebP, BMP or AVIF "
            "image's; open it from the vault to see what it is",
            "unreadable",
        )
    return Served(data, found)


def pdf_page(
    vault: Path,
    relative: str,
    page: int,
    *,
    max_pixels: int = MAX_PAGE_PIXELS,
    max_bytes: int = MAX_FILE_BYTES,
    max_area: int = MAX_PAGE_AREA,
    rules: IgnoreRules | None = None,
) -> Served:
    """Page `page` (1-based) of a PDF of the vault, rendered as PNG, at most `max_pixels`
    along its longer side and `max_area` pixels in all.

    The path is taken as `vault_file` takes it. QueryError (field "page") for a page the PDF
    does not have; LeftOutError for a PDF that is encrypted ("encrypted"), damaged or no PDF
    ("damaged"), or whose page cannot be drawn within the worker's time and memory
    ("too_costly")."""
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise QueryError(f"page: {page!r} is no page; pages are counted from 1", "page")
    if max_pixels < 1 or max_area < 1:
        raise ValueError("max_pixels and max_area must be positive")
    rel = _path_of(relative)
    if PurePosixPath(rel).suffix.lower() != ".pdf":
        raise NoteUnavailableError(rel, "not a PDF; only a .pdf file has pages", "excluded")
    data = _read(vault, rel, max_bytes, rules)
    # PDF readers accept junk before the header within the first 1024 bytes, as the indexer
    # does (vaultd.pipeline.pdf).
    if b"%PDF-" not in data[:1024]:
        raise LeftOutError(
            rel,
            "named .pdf, but it is no PDF (no %PDF- header); open it from the vault",
            "damaged",
        )
    request = b"%d %d %d\n" % (page, max_pixels, max_area)
    try:
        answer = run_child(
            RENDER_MODULE,
            rel,
            request + data,
            timeout=RENDER_TIMEOUT_S,
            memory_mb=RENDER_MEMORY_MB,
        )
    except LeftOutError as exc:
        raise _not_drawn(rel, page, exc) from exc
    return Served(_picture(rel, page, answer, max_pixels, max_area), "image/png")


def _picture(rel: str, page: int, answer: dict[str, Any], max_pixels: int, max_area: int) -> bytes:
    """The PNG the worker drew, checked: it read a hostile file, so what it answers is
    looked at before it is served."""
    try:
        pages = int(answer["pages"])
        body = base64.b64decode(answer["png"], validate=True) if "png" in answer else None
    except (KeyError, TypeError, ValueError) as exc:
        raise LeftOutError(
            rel, f"page {page} could not be drawn (no valid answer)", "damaged"
        ) from exc
    if pages < 1:
        raise LeftOutError(rel, "it has no pages; open it in a PDF reader to check it", "damaged")
    if body is None:
        raise QueryError(
            f"page: {rel} has {pages} page{'s' if pages != 1 else ''}, so no page {page}; "
            f"ask for a page from 1 to {pages}",
            "page",
        )
    size = png_size(body)
    if size is None or max(size) > max_pixels or size[0] * size[1] > max_area:
        raise LeftOutError(rel, f"page {page} could not be drawn (no valid picture)", "damaged")
    return body


def _path_of(relative: str) -> str:
    """`relative` as the vault path it names, by the daemon's rule and with no backslash."""
    if "\\" in relative:
        raise VaultPathError(
            relative, "it holds a backslash; name the file with '/' between its folders"
        )
    return vault_path(relative)


def _page_rules(rules: IgnoreRules | None) -> IgnoreRules:
    """The daemon's rules for the page: every kind of file passes rule 1 (the page decides
    what it serves by itself, and the vault's images are shown even where they are not
    indexed), and the size cap is the page's own."""
    every = frozenset((*NOTE_KINDS, "other"))
    base = rules if rules is not None else IgnoreRules()
    return dataclasses.replace(base, kinds=every, kind_caps_mb=(), max_file_mb=math.inf)


#: What to say for each kind of refusal of the daemon's reader.
_REFUSALS = {
    "missing": "no such file in the vault (moved, renamed or deleted?); check the name",
    "excluded": (
        "the vault's rules leave it out (dot-folders such as .obsidian and .trash, "
        "node_modules, .gitignore, [vault] exclude and include), so the page does not show it"
    ),
    "link": (
        "a symlink is on its way, which vaultd does not follow ([vault] follow_symlinks is "
        "off, or it leads out of the vault), so the page does not show it"
    ),
}


def _read(vault: Path, rel: str, max_bytes: int, rules: IgnoreRules | None) -> bytes:
    """The bytes of the file `rel`, opened as the daemon opens a note; at most `max_bytes`."""
    reader = NoteReader(CompiledRules(vault.resolve(), _page_rules(rules)))
    try:
        fd = reader.open_note(rel)
    except NoteUnavailableError as exc:
        reason = _REFUSALS.get(
            exc.kind, f"{exc.reason}; the page shows only regular files you can read"
        )
        raise NoteUnavailableError(rel, reason, exc.kind) from exc
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise _too_big(rel, size, max_bytes)
        data = _read_at_most(fd, max_bytes + 1, rel)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew since fstat
        raise _too_big(rel, len(data), max_bytes)
    return data


def _read_at_most(fd: int, limit: int, rel: str) -> bytes:
    chunks: list[bytes] = []
    left = limit
    try:
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        why = exc.strerror or errno.errorcode.get(exc.errno or 0, "error")
        raise NoteUnavailableError(rel, f"cannot be read ({why})", "unreadable") from exc
    return b"".join(chunks)


def _too_big(rel: str, size: int, max_bytes: int) -> NoteUnavailableError:
    return NoteUnavailableError(
        rel,
        f"{size / _MB:.1f} MB is more than the page shows ({max_bytes / _MB:g} MB at most); "
        "open it from the vault",
        "too_big",
    )


def _not_drawn(rel: str, page: int, exc: LeftOutError) -> LeftOutError:
    """The worker's refusal, said for a page asked for rather than a file indexed."""
    if exc.kind == "encrypted":
        why = "it is encrypted and opens only with a password; open it in a PDF reader"
    elif exc.kind == "too_costly":
        why = (
            f"page {page} takes more than {RENDER_TIMEOUT_S:g} s or {RENDER_MEMORY_MB} MB to "
            "draw; open it in a PDF reader"
        )
    else:
        reason = exc.reason.removesuffix("; skipped")
        why = f"page {page} cannot be drawn: {reason}; open it in a PDF reader to check it"
    return LeftOutError(rel, why, exc.kind)


def raster_type(data: bytes) -> str | None:
    """The Content-Type of a PNG, JPEG, GIF, WebP, BMP or AVIF image by its first bytes
    (PNG, JPEG and WebP by the indexer's own header reader); None for anything else."""
    header = read_header(data)
    if header is not None:
        return f"image/{header.format}"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if (
        data[:2] == b"BM"
        and len(data) >= 26
        and int.from_bytes(data[14:18], "little") in _BMP_HEADERS
    ):
        return "image/bmp"
    if _is_avif(data):
        return "image/avif"
    return None


def _is_avif(data: bytes) -> bool:
    """Whether the file opens with an ISO media `ftyp` box naming an AVIF brand."""
    if len(data) < 16 or data[4:8] != b"ftyp":
        return False
    size = min(int.from_bytes(data[:4], "big"), len(data), 4096)
    brands = [data[8:12]] + [data[at : at + 4] for at in range(16, size - 3, 4)]
    return any(brand in (b"avif", b"avis") for brand in brands)


def is_svg(data: bytes) -> bool:
    """Whether the file's root element is `<svg`, past a BOM, white space, an XML
    declaration, processing instructions, comments and a doctype."""
    head = data[: SVG_PROLOG_CHARS * 2]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = head.decode("utf-16", "replace")
    else:
        text = head.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    text = text[:SVG_PROLOG_CHARS]
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if text.startswith("<?", at):
            at = _after(text, "?>", at + 2)
        elif text.startswith("<!--", at):
            at = _after(text, "-->", at + 4)
        elif text[at : at + 9].upper() == "<!DOCTYPE":
            at = _after_doctype(text, at + 9)
        else:
            return _SVG_ROOT.match(text, at) is not None
        if at < 0:
            return False


def _after(text: str, end: str, at: int) -> int:
    found = text.find(end, at)
    return -1 if found < 0 else found + len(end)


def _after_doctype(text: str, at: int) -> int:
    """Past a doctype's `>`, and its internal subset's `]` first when it has one."""
    close = text.find(">", at)
    bracket = text.find("[", at)
    if 0 <= bracket < close:
        end = text.find("]", bracket)
        return -1 if end < 0 else _after(text, ">", end)
    return -1 if close < 0 else close + 1


def png_size(body: bytes) -> tuple[int, int] | None:
    """A PNG's width and height from its IHDR chunk; None when it is no PNG."""
    if not body.startswith(PNG_SIGNATURE) or body[12:16] != b"IHDR" or len(body) < 24:
        return None
    width, height = struct.unpack(">II", body[16:24])
    return width, height


# The worker's side: runs in `python -m vaultd.ui.files`, the only place PDFium is loaded.


def render(data: bytes) -> dict[str, Any]:
    """The worker's answer for a request: b"PAGE MAX_PIXELS MAX_AREA\\n" and the PDF's bytes.
    {"pages": count, "png": base64 PNG} or, for a page past the end, {"pages": count}.
    Raises LeftOutError for a PDF that is encrypted or damaged, or a page with no size."""
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    line, _, pdf = data.partition(b"\n")
    page_number, max_pixels, max_area = (int(n) for n in line.split())
    try:
        document = pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
            raise LeftOutError("", "encrypted: it opens only with a password", "encrypted") from exc
        raise LeftOutError("", f"damaged or truncated PDF ({exc})", "damaged") from exc
    try:
        pages = len(document)
        if page_number > pages:
            return {"pages": pages}
        page = document[page_number - 1]
        try:
            png = _draw(page, max_pixels, max_area)
        finally:
            page.close()
    finally:
        document.close()
    return {"pages": pages, "png": base64.b64encode(png).decode("ascii")}


def _draw(page: Any, max_pixels: int, max_area: int) -> bytes:
    """The page as a PNG, white behind it, within both pixel caps."""
    width, height = page.get_size()
    if not (math.isfinite(width) and math.isfinite(height) and width > 0 and height > 0):
        raise LeftOutError("", f"the page has no size ({width} x {height} points)", "damaged")
    scale = page_scale(width, height, max_pixels, max_area)
    bitmap = page.render(scale=scale, rev_byteorder=True)
    try:
        pixels = bitmap.to_numpy()
        if pixels.ndim == 2:  # a grey bitmap
            pixels = pixels[:, :, None].repeat(3, axis=2)
        return encode_png(pixels[:, :, :3])
    finally:
        bitmap.close()


def page_scale(width: float, height: float, max_pixels: int, max_area: int) -> float:
    """The scale (pixels a point) at which a page of `width` x `height` points is drawn
    within both caps. PDFium rounds each side up, which the loop allows for."""
    scale = min((max_pixels - 0.5) / max(width, height), math.sqrt(max_area / (width * height)))
    while math.ceil(width * scale) * math.ceil(height * scale) > max_area and scale > 0:
        scale *= 0.99
    return scale


def encode_png(rgb: npt.NDArray[np.uint8]) -> bytes:
    """An RGB array (height x width x 3) as an 8-bit PNG. Written here rather than by Pillow,
    which vaultd does not depend on; each row is stored unfiltered, which a page (mostly
    white) compresses well without."""
    import numpy as np

    height, width = rgb.shape[:2]
    rows = np.zeros((height, 1 + width * 3), dtype=np.uint8)
    rows[:, 1:] = rgb.reshape(height, width * 3)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (
            PNG_SIGNATURE,
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)),
            _chunk(b"IEND", b""),
        )
    )


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _serve() -> None:
    """The worker `run_child` starts: `python -m vaultd.ui.files MEMORY_MB`."""
    from vaultd.isolation import child_main

    child_main(render)


if __name__ == "__main__":
    _serve()
