"""The readers check: every kind of file switched on in [attachments] has its reader.

Each kind is read by a library of its own; one that is missing leaves every such file out,
which the vault check cannot see (it counts files, it reads none). One function per kind, each
the reader's problem or None.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from vaultd.config import Config
from vaultd.doctor.report import Check, quoted, reinstall


def _missing(module: str) -> bool:
    """Whether `module` cannot be imported (found without importing it: some take seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _pdf_reader(config: Config) -> tuple[str, str] | None:
    """(problem, remedy) when PDFs are on and PDFium's binding is missing."""
    if not config.attachments.pdf or not _missing("pypdfium2"):
        return None
    return (
        "pdf = true, but the PDF reader (pypdfium2) is not installed: every PDF is left out",
        f"reinstall it: {reinstall('pypdfium2')}; or set [attachments] pdf = false",
    )


def _ocr_reader(config: Config) -> tuple[str, str] | None:
    """(problem, remedy) when OCR is on and the `ocr` extra is not installed."""
    from vaultd.embedding.spec import DISTRIBUTION
    from vaultd.pipeline import ocr

    if not config.attachments.ocr or ocr.available():
        return None
    return (
        "ocr = true, but the ocr extra (rapidocr-onnxruntime) is not installed: images and "
        "PDF pages without a text layer are left out",
        f"install it: {quoted(sys.executable)} -m pip install '{DISTRIBUTION}[ocr]'; "
        "or set [attachments] ocr = false",
    )


def _code_readers(config: Config) -> tuple[str, str] | None:
    """(problem, remedy) when `[attachments] code` is set and tree-sitter or the grammar of a
    language its globs can match is missing."""
    from pathlib import PurePosixPath

    from vaultd.pipeline.code import GRAMMARS

    globs = config.attachments.code
    if not globs:
        return None
    # A glob naming an ending ("**/*.py") needs that language's grammar; one that names none
    # ("scripts/**"), or a pattern of them, may match any.
    endings = {PurePosixPath(glob.rstrip("/")).suffix.lower() for glob in globs}
    any_ending = any(not e or any(c in e for c in "*?[") for e in endings)
    wanted = {g.name: g.module for e, g in GRAMMARS.items() if any_ending or e in endings}
    missing = {name: module for name, module in wanted.items() if _missing(module)}
    if _missing("tree_sitter"):
        missing = {"tree-sitter": "tree_sitter", **missing}
    if not missing:
        return None
    packages = " ".join(sorted({module.replace("_", "-") for module in missing.values()}))
    return (
        f"code is set, but its readers are missing ({', '.join(missing)}): those source "
        "files are left out",
        f"reinstall them: {quoted(sys.executable)} -m pip install --force-reinstall {packages}",
    )


#: Each reader check, by the kind it reads.
FILE_READERS: dict[str, Callable[[Config], tuple[str, str] | None]] = {
    "pdf": _pdf_reader,
    "ocr": _ocr_reader,
    "code": _code_readers,
}


def check_readers(config: Config) -> Check:
    """That every kind of file switched on in [attachments] has its reader installed."""
    problems = [found for reader in FILE_READERS.values() if (found := reader(config)) is not None]
    if problems:
        return Check(
            "readers",
            "warn",
            "; ".join(problem for problem, _ in problems),
            "; ".join(remedy for _, remedy in problems),
        )
    on = sorted(config.attachments.kinds() - {"note"})
    return Check("readers", "ok", f"a reader for every kind switched on ({', '.join(on)})")
