"""What to do about a file left out of the index, or indexed in part, by its reason."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from vaultd.doctor.report import quoted

#: The settings whose limit leaves a file indexed in part, named in its reason.
_IN_PART_SETTINGS = {
    "max_pages": "[attachments] max_pages",
    "max_cards": "[attachments] max_cards",
    "max_chunks": "[chunking] max_chunks",
}


def in_part_advice(reasons: Sequence[str]) -> str:
    """What to do about files indexed in part: raise the limit each reason names."""
    settings = [s for key, s in _IN_PART_SETTINGS.items() if any(key in r for r in reasons)]
    if settings:
        return f"raise {' or '.join(settings)} to index the rest of a file indexed in part"
    if reasons and all("not by symbol" in r for r in reasons):
        # A source file that does not parse (vaultd.pipeline.code) has all of its text indexed.
        return (
            "each is searchable in full, by lines rather than by symbol: fix the error named "
            "(or give the minified file's source instead) to have it read by symbol"
        )
    return "the parts named were not read; the rest of each file is indexed"


def left_out_advice(path: str, kind: str, reason: str, ocr_on: bool) -> str:
    """What to do about one left-out file, by its reason's kind (`errors.LeftOutKind`) and,
    for a limit, the setting that applies to a file of its kind."""
    from vaultd.embedding.spec import DISTRIBUTION
    from vaultd.pipeline import ocr
    from vaultd.records import kind_of

    exclude = "or leave it out ([vault] exclude)"
    file_kind = kind_of(path)
    extra = f"install the ocr extra ({quoted(sys.executable)} -m pip install '{DISTRIBUTION}[ocr]')"
    if kind == "too_big":
        if file_kind == "pdf":
            return "over the size limit for PDFs: raise [attachments] max_pdf_mb"
        if file_kind == "image":
            setting = "max_image_megapixels" if "megapixel" in reason else "max_image_mb"
            return f"over the limit for images: raise [attachments] {setting}"
        return "over the size limit: raise [vault] max_file_mb"
    if kind == "too_costly":
        if "extract_timeout" in reason or "longer than" in reason:
            return "too slow to read: raise [attachments] extract_timeout"
        return "too much memory to read: raise [attachments] extract_memory_mb"
    if kind == "no_text":
        if file_kind not in ("pdf", "image"):
            return "nothing in it vaultd reads as text: leave it out ([vault] exclude)"
        missing = not ocr.available()
        if not ocr_on and file_kind == "pdf":
            turn_on = "set [attachments] ocr = true" + (f" and {extra}" if missing else "")
            return f"its pages are pictures (no text layer): {turn_on}"
        if missing:
            return f"its text is in pictures: {extra}"
        return f"OCR reads no text in it: nothing to do, {exclude}"
    if kind == "encrypted":
        return (
            "encrypted: it opens only with a password, which vaultd never asks for; save a copy "
            f"without the password to index it, {exclude}"
        )
    if kind == "binary":
        return "binary content, no text: leave it out ([vault] exclude)"
    if kind == "not_utf8":
        return f"not UTF-8 text: save it as UTF-8, {exclude}"
    if kind == "unreadable" and reason.startswith("cannot read"):
        return f"give your user read access (chmod u+r {quoted(path)})"
    if kind in ("unreadable", "damaged"):
        return f"damaged or of a format vaultd does not read: repair or save it again, {exclude}"
    return f"fix the file, {exclude}"
