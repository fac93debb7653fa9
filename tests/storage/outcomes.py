"""A pass's outcomes made by hand, for the storage modules' tests: what the indexer would hand
the manifest for a note, without parsing or chunking one."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from vaultd.records import Chunk, FileState, Link, Note, NoteFailed, NoteLeftOut, NoteWritten


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def written(
    path: str,
    texts: Sequence[str] = ("some text",),
    *,
    title: str = "",
    tags: Sequence[str] = (),
    aliases: Sequence[str] = (),
    links: Sequence[str] = (),
    frontmatter: dict[str, object] | None = None,
    sha256: str = "",
    mtime_ns: int = 1,
) -> NoteWritten:
    """A note indexed as one chunk per text, each section named after its place."""
    title = title or path.rsplit("/", 1)[-1].removesuffix(".md")
    chunks = []
    for index, text in enumerate(texts):
        section = f"part {index}"
        context = f"{title} > {section}"
        embed_text = f"{context}\n\n{text}"
        chunks.append(
            Chunk(
                id=f"{path}#{index}",
                index=index,
                section=section,
                headings=(section,),
                start_line=index * 10 + 1,
                end_line=index * 10 + 5,
                text=text,
                embed_text=embed_text,
                tokens=len(embed_text.split()),
                hash=digest(embed_text),
                context=context,
            )
        )
    note = Note(
        path,
        title,
        aliases=tuple(aliases),
        tags=tuple(tags),
        links=tuple(Link(target) for target in links),
        frontmatter=frontmatter or {},
    )
    state = FileState(path, sum(len(t) for t in texts), mtime_ns, mtime_ns, 7, mtime_ns)
    return NoteWritten(note, state, sha256 or digest(path + "".join(texts)), tuple(chunks))


def failed(path: str, sha256: str = "bytes-1", reason: str = "cannot parse") -> NoteFailed:
    return NoteFailed(FileState(path, 10, 2), sha256, reason)


def left_out(path: str, kind: str = "binary", reason: str = "holds NUL bytes") -> NoteLeftOut:
    return NoteLeftOut(FileState(path, 10, 3), "bytes-2", kind, reason)


def source(path: str, package: str | None, texts: Sequence[str] = ("fn x() {}",)) -> NoteWritten:
    """A source file indexed, in `package`."""
    made = written(path, texts)
    return replace(made, note=replace(made.note, kind="code"), package=package)
