"""The page's images and PDF pages (vaultd.ui.files): served only as the daemon reads the
vault, only when they are what their names say, and PDF pages drawn within their caps.

Real files in a real vault folder: PNGs written here with zlib and the shared corpus's
screenshots, real PDFs (the shared corpus's and `make_pdf`'s), drawn by the real PDFium in
its worker process; real symlinks, FIFOs and folders.
"""

from __future__ import annotations

import io
import os
import struct
import time
import unicodedata
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.conftest import shared_path
from tests.test_attachments import make_pdf, pdf_file
from vaultd.errors import LeftOutError, NoteUnavailableError, QueryError, VaultPathError
from vaultd.isolation import close_children
from vaultd.pipeline.discover.rules import IgnoreRules
from vaultd.ui.files import (
    MAX_PAGE_AREA,
    MAX_PAGE_PIXELS,
    PNG_SIGNATURE,
    Served,
    pdf_page,
    vault_file,
)

SCREENSHOT = "Roam-exporting.png"
JPEG = "status-bar-mobile.jpeg"
REAL_PDF = "asyRefCard.pdf"  # three pages of a reference card
#: The classic smallest GIF: one white pixel.
GIF = (
    b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00"
    b"\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
)
HTML = b"<!DOCTYPE html><html><body><script>alert(document.cookie)</script></body></html>"
E = TypeVar("E", bound=Exception)
SCRIPTED_SVG = (
    b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="alert(1)">'
    b"<script>alert(document.cookie)</script><rect width='10' height='10'/></svg>"
)


@pytest.fixture(autouse=True, scope="module")
def no_worker_left() -> Iterator[None]:
    yield
    close_children()  # the drawing worker is kept for the next page: none outlives the tests


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    return root


def put(vault: Path, rel: str, data: bytes) -> Path:
    path = vault / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def png(width: int = 3, height: int = 2, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A real RGB PNG of one colour."""
    row = b"\x00" + bytes(colour) * width

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def bmp() -> bytes:
    """A real 24-bit BMP of one blue pixel (its row padded to 4 bytes)."""
    pixels = b"\xff\x00\x00\x00"
    info = struct.pack("<IiiHHIIiiII", 40, 1, 1, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    head = b"BM" + struct.pack("<IHHI", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return head + info + pixels


def pillow(kind: str) -> bytes:
    image = pytest.importorskip("PIL.Image")
    out = io.BytesIO()
    image.new("RGB", (4, 3), (20, 120, 200)).save(out, kind)
    return out.getvalue()


def refused(
    error: type[E], tmp_path: Path, call: Callable[..., Served], *args: Any, **kwargs: Any
) -> E:
    """The error `call(*args, **kwargs)` raises, checked to name no path of the machine."""
    with pytest.raises(error) as caught:
        call(*args, **kwargs)
    assert str(tmp_path) not in str(caught.value)
    return caught.value


# Images


def test_a_real_screenshot_is_served_byte_for_byte_as_png(vault: Path) -> None:
    data = shared_path("corpora", "attachments", "images", SCREENSHOT).read_bytes()
    put(vault, f"attachments/{SCREENSHOT}", data)
    assert vault_file(vault, f"attachments/{SCREENSHOT}") == Served(data, "image/png")


def test_a_real_jpeg_is_served_as_jpeg_even_when_named_png(vault: Path) -> None:
    data = shared_path("corpora", "attachments", "images", JPEG).read_bytes()
    put(vault, "a.jpeg", data)
    put(vault, "saved-as.png", data)
    assert vault_file(vault, "a.jpeg") == Served(data, "image/jpeg")
    # The type is what the bytes are: a browser told image/png would not show a JPEG.
    assert vault_file(vault, "saved-as.png").content_type == "image/jpeg"


@pytest.mark.parametrize(
    ("name", "make", "content_type"),
    [
        ("a.png", png, "image/png"),
        ("a.PNG", png, "image/png"),
        ("a.gif", lambda: GIF, "image/gif"),
        ("a.bmp", bmp, "image/bmp"),
        ("a.webp", lambda: pillow("WEBP"), "image/webp"),
        ("a.avif", lambda: pillow("AVIF"), "image/avif"),
        ("a.svg", lambda: SCRIPTED_SVG, "image/svg+xml"),
    ],
)
def test_each_image_kind_is_served_as_the_type_its_bytes_say(
    vault: Path, name: str, make: Callable[[], bytes], content_type: str
) -> None:
    data = make()
    put(vault, f"pics/{name}", data)
    assert vault_file(vault, f"pics/{name}") == Served(data, content_type)


def test_a_path_means_what_it_means_to_the_daemon(vault: Path) -> None:
    data = png()
    put(vault, "pics/a.png", data)
    assert vault_file(vault, "pics//./a.png").body == data
    assert vault_file(vault, "./pics/a.png/").body == data
    # A name synced from macOS is decomposed on disk; the daemon's paths are NFC.
    put(vault, unicodedata.normalize("NFD", "pics/café.png"), data)
    assert vault_file(vault, unicodedata.normalize("NFC", "pics/café.png")).body == data


@pytest.mark.parametrize(
    "relative",
    [
        "",
        "/",
        "/etc/passwd",
        "ABSOLUTE",
        "../outside/a.png",
        "pics/../../outside/a.png",
        "pics/../a.png",
        "pics\\a.png",
        "..\\outside\\a.png",
        "\\\\server\\share\\a.png",
        "C:/a.png",
        "pics/a\0.png",
        "pics/\udc80.png",
    ],
)
def test_a_path_that_is_no_vault_path_is_refused(
    vault: Path, tmp_path: Path, relative: str
) -> None:
    put(vault, "pics/a.png", png())
    put(vault, "a.png", png())
    put(tmp_path, "outside/a.png", png())
    if relative == "ABSOLUTE":
        relative = str(vault / "pics" / "a.png")
    with pytest.raises(VaultPathError):
        vault_file(vault, relative)


@pytest.mark.parametrize(
    "relative",
    [
        ".obsidian/a.png",
        ".trash/a.png",
        ".git/a.png",
        "pics/.hidden/a.png",
        "pics/.a.png",
        "node_modules/a.png",
        "ignored/a.png",
        "private/a.png",
    ],
)
def test_what_the_daemon_leaves_out_is_refused(vault: Path, tmp_path: Path, relative: str) -> None:
    put(vault, relative, png())
    put(vault, ".gitignore", b"ignored/\n")
    rules = IgnoreRules(exclude=("private/",))
    error = refused(NoteUnavailableError, tmp_path, vault_file, vault, relative, rules=rules)
    assert error.kind == "excluded"
    assert "vault's rules" in str(error)


def test_without_the_users_rules_the_daemons_defaults_hold(vault: Path) -> None:
    put(vault, "private/a.png", png())
    assert vault_file(vault, "private/a.png").content_type == "image/png"


def test_a_symlink_is_refused_as_the_daemon_refuses_it(vault: Path, tmp_path: Path) -> None:
    outside = put(tmp_path, "outside/secret.png", png())
    inside = put(vault, "pics/a.png", png())
    (vault / "out.png").symlink_to(outside)
    (vault / "passwd.png").symlink_to("/etc/passwd")
    (vault / "linked").symlink_to(outside.parent, target_is_directory=True)
    (vault / "same.png").symlink_to(inside)
    for relative in ("out.png", "passwd.png", "linked/secret.png", "same.png"):
        error = refused(NoteUnavailableError, tmp_path, vault_file, vault, relative)
        assert error.kind == "link", relative
    # Where the user has the daemon follow links, one out of the vault is still refused.
    follow = IgnoreRules(follow_symlinks=True)
    for relative in ("out.png", "passwd.png", "linked/secret.png"):
        error = refused(NoteUnavailableError, tmp_path, vault_file, vault, relative, rules=follow)
        assert error.kind == "link", relative


def test_a_fifo_a_folder_and_a_missing_file_are_refused(vault: Path, tmp_path: Path) -> None:
    os.mkfifo(vault / "pipe.png")
    (vault / "folder.png").mkdir()
    started = time.monotonic()
    kinds = {}
    for relative in ("pipe.png", "folder.png", "gone.png", "gone/a.png"):
        error = refused(NoteUnavailableError, tmp_path, vault_file, vault, relative)
        kinds[relative] = error.kind
    assert kinds == {
        "pipe.png": "unreadable",
        "folder.png": "unreadable",
        "gone.png": "missing",
        "gone/a.png": "missing",
    }
    assert time.monotonic() - started < 5  # a FIFO with no writer must not hang the request


@pytest.mark.parametrize("name", ["note.md", "page.html", "doc.pdf", "script.js", "noext"])
def test_a_file_that_is_no_image_by_its_name_is_refused(
    vault: Path, tmp_path: Path, name: str
) -> None:
    put(vault, name, png())
    error = refused(NoteUnavailableError, tmp_path, vault_file, vault, name)
    assert error.kind == "excluded"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("page.png", HTML),
        ("page.jpg", HTML),
        ("page.gif", b"GIF8" + HTML),
        ("page.bmp", b"BM" + HTML),
        ("drawing.png", SCRIPTED_SVG),
        ("page.svg", HTML),
        ("page.svg", b'<?xml version="1.0"?>\n<html><body>hi</body></html>'),
        ("page.svg", b"<!-- <svg> -->\n<html></html>"),
        ("picture.svg", png()),
        ("empty.png", b""),
        ("empty.svg", b""),
    ],
)
def test_a_file_that_is_not_what_its_name_says_is_refused(
    vault: Path, tmp_path: Path, name: str, data: bytes
) -> None:
    put(vault, name, data)
    error = refused(LeftOutError, tmp_path, vault_file, vault, name)
    assert error.kind == "unreadable"


@pytest.mark.parametrize(
    "data",
    [
        SCRIPTED_SVG,
        b"\xef\xbb\xbf  \n" + SCRIPTED_SVG,
        b'<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n<!-- drawn by hand -->\n'
        b'<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
        b'"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd" [ <!ENTITY ns "x"> ]>\n'
        + SCRIPTED_SVG,
        b'<?xml-stylesheet href="a.css"?><svg/>',
        "<svg></svg>".encode("utf-16"),
    ],
)
def test_an_svg_is_served_as_svg_script_and_all(vault: Path, data: bytes) -> None:
    # Served as it is: the server sends SVG with a `sandbox` policy, so a script never runs.
    put(vault, "drawing.svg", data)
    assert vault_file(vault, "drawing.svg") == Served(data, "image/svg+xml")


def test_a_file_over_the_cap_is_refused_without_being_read(vault: Path, tmp_path: Path) -> None:
    data = png()
    put(vault, "small.png", data)
    assert vault_file(vault, "small.png", max_bytes=len(data)).body == data
    error = refused(
        NoteUnavailableError, tmp_path, vault_file, vault, "small.png", max_bytes=len(data) - 1
    )
    assert error.kind == "too_big"
    # 64 GB that are not on the disk: reading them would take minutes, refusing takes none.
    with open(vault / "huge.png", "wb") as handle:
        handle.write(data)
        handle.truncate(64 * 1024**3)
    started = time.monotonic()
    error = refused(NoteUnavailableError, tmp_path, vault_file, vault, "huge.png")
    assert error.kind == "too_big"
    assert "20 MB" in str(error)
    assert time.monotonic() - started < 1


# PDF pages


def png_of(served: Served) -> tuple[int, int, bytes]:
    """The PNG's width, height and decompressed rows, checked chunk by chunk (CRCs too)."""
    assert served.content_type == "image/png"
    body = served.body
    assert body.startswith(PNG_SIGNATURE)
    at, idat, size = len(PNG_SIGNATURE), b"", None
    while at < len(body):
        (length,) = struct.unpack(">I", body[at : at + 4])
        kind, data = body[at + 4 : at + 8], body[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", body[at + 8 + length : at + 12 + length])
        assert crc == zlib.crc32(kind + data)
        if kind == b"IHDR":
            size = struct.unpack(">II", data[:8])
            assert data[8:10] == b"\x08\x02"  # 8 bits a channel, RGB
        elif kind == b"IDAT":
            idat += data
        at += 12 + length
    assert size is not None
    width, height = size
    rows = zlib.decompress(idat)
    assert len(rows) == height * (1 + 3 * width)
    return width, height, rows


def inked(served: Served) -> int:
    """How many pixels of the drawn page are not white (decoded by Pillow)."""
    image = pytest.importorskip("PIL.Image")
    with image.open(io.BytesIO(served.body)) as picture:
        picture.load()
        return sum(picture.convert("L").histogram()[:200])


def test_a_real_pdfs_pages_are_drawn_as_png_within_the_caps(vault: Path) -> None:
    put(
        vault,
        f"docs/{REAL_PDF}",
        shared_path("corpora", "attachments", "pdf", REAL_PDF).read_bytes(),
    )
    for page in (1, 3):
        served = pdf_page(vault, f"docs/{REAL_PDF}", page)
        width, height, _ = png_of(served)
        assert MAX_PAGE_PIXELS - 2 <= max(width, height) <= MAX_PAGE_PIXELS
        assert width * height <= MAX_PAGE_AREA
        assert inked(served) > 10_000  # the card's text is drawn, not a blank page
    width, height, _ = png_of(pdf_page(vault, f"docs/{REAL_PDF}", 2, max_pixels=300))
    assert max(width, height) <= 300


def test_a_hand_made_pdfs_page_is_drawn(vault: Path) -> None:
    put(vault, "two.pdf", make_pdf(["The first page.", "The second page, with more words."]))
    served = pdf_page(vault, "two.pdf", 2, max_pixels=400)
    width, height, _ = png_of(served)
    assert (width, height) == (291, 400)  # A4 at 612 x 842 points, its longer side 400
    assert inked(served) > 50


@pytest.mark.parametrize("page", [0, -1, 3, 10**9, True])
def test_a_page_the_pdf_lacks_is_refused_naming_the_page(
    vault: Path, tmp_path: Path, page: int
) -> None:
    put(vault, "two.pdf", make_pdf(["one", "two"]))
    error = refused(QueryError, tmp_path, pdf_page, vault, "two.pdf", page)
    assert error.field == "page"
    if page == 3:
        assert "ask for a page from 1 to 2" in str(error)


def test_an_encrypted_pdf_is_refused_as_encrypted(vault: Path, tmp_path: Path) -> None:
    put(vault, "locked.pdf", make_pdf(["secret"], encrypt=True))
    error = refused(LeftOutError, tmp_path, pdf_page, vault, "locked.pdf", 1)
    assert error.kind == "encrypted"
    assert "password" in str(error)


def test_a_damaged_pdf_or_one_that_is_no_pdf_is_refused_as_damaged(
    vault: Path, tmp_path: Path
) -> None:
    real = make_pdf(["one", "two"])
    put(vault, "truncated.pdf", real[: len(real) // 3])
    put(vault, "garbage.pdf", b"%PDF-1.7\n" + os.urandom(4096))
    put(vault, "page.pdf", HTML)
    for name in ("truncated.pdf", "garbage.pdf", "page.pdf"):
        error = refused(LeftOutError, tmp_path, pdf_page, vault, name, 1)
        assert error.kind == "damaged", name
        assert "open it" in str(error)
    # The worker that read them is still there for the next page.
    put(vault, "fine.pdf", real)
    assert png_of(pdf_page(vault, "fine.pdf", 1))[0] > 0


def boxed_pdf(width: float, height: float) -> bytes:
    """A one-page PDF of that MediaBox (points), a black square in its lower left corner."""
    content = b"0 g 0 0 %g %g re f" % (min(width, height) / 2, min(width, height) / 2)
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Contents 4 0 R >>"
            % (width, height),
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        ]
    )


def test_a_page_declared_huge_is_drawn_within_the_pixel_budget(vault: Path) -> None:
    # 10,000 inches a side: at 72 dpi, 720,000 x 720,000 pixels (1.5 TB of RGB).
    put(vault, "huge.pdf", boxed_pdf(720_000, 720_000))
    width, height, _ = png_of(pdf_page(vault, "huge.pdf", 1))
    assert max(width, height) <= MAX_PAGE_PIXELS
    # With no cap on a side, the budget of pixels in all still holds.
    served = pdf_page(vault, "huge.pdf", 1, max_pixels=10**9)
    width, height, _ = png_of(served)
    assert width * height <= MAX_PAGE_AREA
    assert width * height > MAX_PAGE_AREA * 0.95
    assert inked(served) > 0
    # A page a point wide and a mile long is a strip, not nothing.
    put(vault, "strip.pdf", boxed_pdf(1, 100_000))
    width, height, _ = png_of(pdf_page(vault, "strip.pdf", 1, max_area=10_000))
    assert width >= 1
    assert height <= MAX_PAGE_PIXELS
    assert width * height <= 10_000


def test_a_pdf_is_opened_by_the_same_rules_as_an_image(vault: Path, tmp_path: Path) -> None:
    real = make_pdf(["one"])
    outside = put(tmp_path, "outside/other.pdf", real)
    (vault / "link.pdf").symlink_to(outside)
    put(vault, ".trash/old.pdf", real)
    put(vault, "a.png", png())
    put(vault, "big.pdf", real)  # a few hundred bytes
    os.mkfifo(vault / "pipe.pdf")
    cases = {
        "link.pdf": "link",
        ".trash/old.pdf": "excluded",
        "a.png": "excluded",
        "pipe.pdf": "unreadable",
        "gone.pdf": "missing",
    }
    for relative, kind in cases.items():
        error = refused(NoteUnavailableError, tmp_path, pdf_page, vault, relative, 1)
        assert error.kind == kind, relative
    error = refused(NoteUnavailableError, tmp_path, pdf_page, vault, "big.pdf", 1, max_bytes=100)
    assert error.kind == "too_big"
    with pytest.raises(VaultPathError):
        pdf_page(vault, "../outside/other.pdf", 1)
