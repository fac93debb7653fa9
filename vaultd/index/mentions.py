"""Unlinked mentions: the notes that name a note in their text without linking to it.

Obsidian lists them under a note's backlinks, as connections waiting to be made. A note is
named by its title, its file name or one of its aliases, as a whole phrase (case, accents and
punctuation aside). Candidates come from the words index (a phrase query on the text column)
or, for a name in an unspaced script, from a substring scan; each is checked again line by
line, so a stemmed near-miss is no mention. Notes that link to the note already (by any of
its names) are left out, and so is the note itself, and so are files that cannot hold a link
(a PDF, an image, a source file): naming a note there is no connection waiting to be made,
since no link can be added where the name is.

A line is checked as a reader sees it: a name inside a URL or a link's target
(`https://example.com/Canvas-tips`, `[guide](https://…/Canvas)`) is no mention, and the line is
shown with its emphasis markup (`**bold**`, `_italic_`, `==highlight==`) taken out, so that the
mark around the name is the only one and lands on the name, never on the asterisks.
"""

from __future__ import annotations

import re
from typing import Any

from vaultd.answers import Mention
from vaultd.index import snippets
from vaultd.query import has_phrase, is_unspaced
from vaultd.storage.manifest import Manifest

#: Chunks looked at per name: far more than a page of mentions needs.
CANDIDATES = 400
#: The kinds of file (`records.NoteKind`) a link can be written in: only these mention.
LINKING_KINDS = frozenset({"note", "canvas", "excalidraw"})
#: A shorter name (in a spaced script) would be found in too many notes by chance.
MIN_NAME_CHARS = 3

#: What a reader does not read as text: a link's target (`](…)`), an autolink (`<…:…>`) and a
#: bare URL (`scheme://…`, `www.…`).
_HIDDEN = re.compile(
    r"\]\([^()\s]*(?:\([^()\s]*\)[^()\s]*)*(?:\s+\"[^\"]*\")?\)"
    r"|<[a-z][a-z0-9+.-]*:[^>\s]*>"
    r"|\b[a-z][a-z0-9+.-]*://[^\s<>\[\]]*[^\s<>\[\].,;:!?)'\"]"
    r"|\bwww\.[^\s<>\[\]]*[^\s<>\[\].,;:!?)'\"]",
    re.IGNORECASE,
)
#: Emphasis that pairs up around text: bold, highlight, strike-through...
_PAIRED = re.compile(r"(\*\*|__|==|~~)(?=\S)(.+?)(?<=\S)\1")
#: ...and italics, whose single `*` or `_` must not be inside a word (`snake_case`).
_ITALIC = re.compile(r"(?<![\w*])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])")


def names_of(path: str, row: dict[str, Any]) -> list[str]:
    """What a note is called (title, file name, aliases), from its manifest row."""
    stem = path.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    names = [str(row.get("title") or ""), stem, *(str(a) for a in row.get("aliases", []))]
    usable = [
        n.strip() for n in names if len(n.strip()) >= (2 if is_unspaced(n) else MIN_NAME_CHARS)
    ]
    return list(dict.fromkeys(usable))


def unlinked_mentions(manifest: Manifest, path: str, k: int = 50) -> list[Mention] | None:
    """Up to `k` mentions of the note at `path` in notes not linking to it, by path and line
    (None: no indexed note)."""
    row = manifest.notes.row(path)
    if row is None:
        return None
    names = names_of(path, row)
    linking = set(manifest.links.backlinks(path, row.get("aliases", [])))
    # One mention per line of a passage that names the note (by whichever name first).
    found: dict[tuple[str, int, int], Mention] = {}
    for name in names:
        if is_unspaced(name):
            ids = [i for i, _ in manifest.keyword.substring([name], CANDIDATES)]
        else:
            words = " ".join(_words(name))
            ids = [i for i, _ in manifest.keyword.bm25(f'text : "{words}"', CANDIDATES)]
        chunks = manifest.notes.chunks_by_id(ids).values()
        kinds = manifest.notes.kinds_of(sorted({stored.path for stored in chunks}))
        for stored in chunks:
            if stored.path == path or stored.path in linking:
                continue
            if kinds.get(stored.path) not in LINKING_KINDS:
                continue
            chunk = stored.chunk
            for at, line in enumerate(chunk.text.split("\n")):
                if not has_phrase(line, name):
                    continue  # the cheap test first: most lines of a candidate name nothing
                key = (stored.path, chunk.start_line, at)
                if key in found:
                    continue
                shown, hidden = _as_read(line)
                if not has_phrase(_masked(shown, hidden), name):
                    continue
                spans = [span for span in _spans(shown, name) if not _within(span, hidden)]
                found[key] = Mention(
                    stored.path,
                    stored.title,
                    chunk.start_line,
                    chunk.end_line,
                    snippets.bolded(*snippets.snippet(shown.strip(), _shift(spans, shown))),
                    name,
                )
    ordered = sorted(found.items(), key=lambda item: item[0])
    return [mention for _, mention in ordered][:k]


def _words(name: str) -> list[str]:
    return [w for w in "".join(c if c.isalnum() else " " for c in name).split() if w]


def _as_read(line: str) -> tuple[str, list[snippets.Span]]:
    """`line` without its emphasis markup (outside URLs and link targets), and where those
    stand in it."""
    parts: list[str] = []
    hidden: list[snippets.Span] = []
    at = shown = 0
    for match in _HIDDEN.finditer(line):
        plain = _plain(line[at : match.start()])
        shown += len(plain)
        parts += [plain, match.group()]
        hidden.append((shown, shown + len(match.group())))
        shown += len(match.group())
        at = match.end()
    parts.append(_plain(line[at:]))
    return "".join(parts), hidden


def _plain(text: str) -> str:
    """`text` with its paired emphasis markers taken out (nested ones too)."""
    while True:
        plain = _ITALIC.sub(r"\2", _PAIRED.sub(r"\2", text))
        if plain == text:
            return plain
        text = plain


def _masked(text: str, hidden: list[snippets.Span]) -> str:
    """`text` with its `hidden` spans blanked."""
    for start, end in hidden:
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def _within(span: snippets.Span, hidden: list[snippets.Span]) -> bool:
    return any(start < span[1] and span[0] < end for start, end in hidden)


def _spans(line: str, name: str) -> list[snippets.Span]:
    """Where `name` stands in `line`, ignoring case: its words, whole, with any punctuation
    or spaces between (a name in an unspaced script: wherever it occurs)."""
    if is_unspaced(name):
        lowered, needle = line.lower(), name.lower()
        if len(lowered) != len(line):
            return []
        return snippets.unspaced_spans(line, [name]) if needle in lowered else []
    words = _words(name)
    if not words:
        return []
    pattern = r"(?<!\w)" + r"[\W_]+".join(re.escape(w) for w in words) + r"(?!\w)"
    return [m.span() for m in re.finditer(pattern, line, re.IGNORECASE)]


def _shift(spans: list[snippets.Span], line: str) -> list[snippets.Span]:
    """Spans in `line` as offsets in `line.strip()`."""
    lead = len(line) - len(line.lstrip())
    return [(s - lead, e - lead) for s, e in spans]
