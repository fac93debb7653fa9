"""What would be indexed for one file of any kind, without touching any index
(`vaultd inspect`): a note, a canvas, a drawing, a PDF (read in the extraction worker, with
its limits, as indexing reads it)."""

from __future__ import annotations

import dataclasses
import os
import stat
import unicodedata
from pathlib import Path
from typing import Any

from vaultd.config import Config
from vaultd.embedding.derive import cache_dir, converted
from vaultd.embedding.spec import load_spec
from vaultd.embedding.tokens import TokenCounter, chunk_budget
from vaultd.errors import LeftOutError, NotAFileError, NoteError
from vaultd.index.extract import Extraction, extract_note, turned_off
from vaultd.index.models import resolve
from vaultd.isolation import close_children
from vaultd.pipeline.chunk import capped
from vaultd.records import chunk_json


def note_path(file: Path, vault: Path | None) -> str:
    """The vault-relative POSIX path when `file` is inside the vault, else its name."""
    resolved = file.resolve()
    if vault is not None:
        try:
            relative = resolved.relative_to(vault.resolve()).as_posix()
            return unicodedata.normalize("NFC", relative)
        except ValueError:
            pass
    return unicodedata.normalize("NFC", resolved.name)


#: What a file that is not a regular one is, for the error naming it.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def read_capped(file: Path, max_bytes: int) -> bytes:
    """The bytes of `file`, a regular file of at most `max_bytes` (the indexer's limit).

    Raises NotAFileError for anything else, LeftOutError ("too_big") over the limit, NoteError
    when it cannot be read. Opened non-blocking, so a FIFO is refused rather than waited on,
    and never read past the limit, so a file that grows while read (or lies about its size)
    cannot fill the memory.
    """
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise NoteError(f"cannot read {file}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((k for test, k in _KINDS if test(info.st_mode)), "no kind of file known")
            name = f"{file} (a link to {os.path.realpath(file)})" if file.is_symlink() else file
            raise NotAFileError(str(name), kind)
        if info.st_size > max_bytes:
            raise LeftOutError(str(file), _too_big(info.st_size, max_bytes), "too_big")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise NoteError(f"cannot read {file}: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise LeftOutError(str(file), _too_big(len(data), max_bytes, more=True), "too_big")
    return data


def _too_big(size: int, max_bytes: int, *, more: bool = False) -> str:
    over = "more than " if more else ""
    return (
        f"{over}{size / 1048576:.1f} MiB is over the {max_bytes / 1048576:g} MiB limit "
        "([vault] max_file_mb); skipped"
    )


def preview_file(file: Path, config: Config) -> dict[str, Any]:
    """Parse and chunk `file` as indexing would; a note that cannot be indexed says why."""
    try:
        return _preview(file, config)
    finally:
        close_children()  # a PDF's reader, if one was started


def _preview(file: Path, config: Config) -> dict[str, Any]:
    path = note_path(file, config.vault.path)
    # The model's own tokenizer, converted first if it is shipped in another format.
    spec = converted(load_spec(resolve(config)), cache_dir(os.environ))
    counter = TokenCounter.for_spec(spec)
    max_bytes = int(config.vault.max_file_mb * 1024 * 1024)
    extraction = Extraction.from_config(config.attachments, config.chunking)
    kind = extraction.kind(path)
    # A PDF's or an image's own cap, as the discovery applies it; the note's for the rest.
    caps = {"pdf": config.attachments.max_pdf_mb, "image": config.attachments.max_image_mb}
    file_cap = int(caps[kind] * 1024 * 1024) if kind in caps else max_bytes
    off = [] if kind in config.attachments.kinds() else [turned_off(kind)]
    try:
        # Not a file at all, or unreadable: an error. Too big: a note left out, as indexing says.
        data = read_capped(file, file_cap)
    except LeftOutError as exc:
        errors = [*off, f"{path}: {exc.reason}"]
        return {"path": path, "kind": kind, "skipped": True, "errors": errors, "chunks": []}
    try:
        budget = chunk_budget(config.chunking.max_tokens, spec, counter)
        note = extract_note(
            path,
            data,
            max_bytes=max_bytes,
            extraction=extraction,
            counter=counter,
            max_tokens=budget,
        )
    except LeftOutError as exc:
        errors = [*off, f"{path}: {exc.reason}"]
        return {"path": path, "kind": kind, "skipped": True, "errors": errors, "chunks": []}
    except NoteError as exc:
        errors = [*off, str(exc)]
        return {"path": path, "kind": kind, "skipped": True, "errors": errors, "chunks": []}
    note, chunks = capped(note, counter, budget, extraction.max_chunks)
    return {
        "path": note.path,
        "kind": note.kind,
        "title": note.title,
        "aliases": list(note.aliases),
        "tags": list(note.tags),
        "frontmatter": dict(note.frontmatter),
        "links": [dataclasses.asdict(link) for link in note.links],
        "errors": [*off, *note.errors],
        "chunks": [chunk_json(c) for c in chunks],
    }


def _where(chunk: dict[str, Any]) -> str:
    """A chunk's location besides its lines, for the text report."""
    parts = []
    if chunk.get("page") is not None:
        end = chunk.get("page_end") or chunk["page"]
        parts.append(f"page {chunk['page']}" + (f"-{end}" if end != chunk["page"] else ""))
    if chunk.get("node"):
        parts.append(f"node {chunk['node']}")
    if chunk.get("symbol"):
        parts.append(chunk["symbol"])
    return "".join(f" · {p}" for p in parts)


def render_text(report: dict[str, Any]) -> str:
    """A readable summary of `preview_file`'s report."""
    out = [f"path:     {report['path']}", f"kind:     {report.get('kind', 'note')}"]
    if report.get("skipped"):
        out.append("skipped:  " + "; ".join(report["errors"]))
        return "\n".join(out)
    out.append(f"title:    {report['title']}")
    if report["aliases"]:
        out.append("aliases:  " + ", ".join(report["aliases"]))
    out.append("tags:     " + (", ".join(f"#{t}" for t in report["tags"]) or "-"))
    out.append(f"links:    {len(report['links'])}")
    for link in report["links"]:
        anchor = f"#{link['heading']}" if link["heading"] else ""
        anchor += f"#^{link['block']}" if link["block"] else ""
        alias = f" ({link['alias']})" if link["alias"] else ""
        out.append(f"  {'!' if link['embed'] else ''}[[{link['target']}{anchor}]]{alias}")
    for error in report["errors"]:
        out.append(f"warning:  {error}")
    chunks = report["chunks"]
    total = sum(c["tokens"] for c in chunks)
    out.append(f"chunks:   {len(chunks)} ({total} tokens embedded)")
    for c in chunks:
        section = c["section"] or "(top)"
        out.append("")
        out.append(
            f"[{c['index']}] lines {c['start_line']}-{c['end_line']}{_where(c)} · "
            f"{c['tokens']} tokens · {section}"
        )
        preview = c["text"] if len(c["text"]) <= 240 else c["text"][:237] + "..."
        out.extend("    " + line for line in preview.split("\n"))
    return "\n".join(out)
