"""Where a hit's text holds the query's terms, and short passages cut around them: snippets.

The words are found where the words index matched them (FTS5's own `highlight`, so stemmed
forms and phrases are found exactly as they were matched); runs of unspaced scripts (Chinese,
Japanese, Thai...) where the run occurs in the text, or else its pairs of characters, which is
how the pairs index found them. The snippet is the stretch of lines with the most matches, cut
to about `SNIPPET_CHARS` characters at word boundaries, with "…" where text was left out; the
hit keeps the line range of its passage.

Matches are given as ranges (`Span`, [start, end) in code points) beside the text, never as
markup in it: a note writes bold as `**bold**`, so markers put into its text could not be told
from its own, by a person, a program or a language model.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from vaultd.answers import Hit
from vaultd.query import ParsedQuery
from vaultd.storage.manifest import Manifest

#: About how long a snippet is.
SNIPPET_CHARS = 280
ELLIPSIS = "…"
#: What the index is asked to put around a match: characters no note holds in practice (a
#: passage that does hold one is given no ranges of its words: `spans_of_marked` could not
#: tell its own from the index's).
_START = "\x02"
_END = "\x03"

Span = tuple[int, int]


def spans_of_marked(marked: str) -> tuple[str, list[Span]]:
    """The text of `marked` (as `manifest.keyword.marked` returns it) and where its marks were."""
    text: list[str] = []
    spans: list[Span] = []
    at = 0
    opened = -1
    for part in re.split(f"([{_START}{_END}])", marked):
        if part == _START:
            opened = at
        elif part == _END:
            if opened >= 0 and at > opened:
                spans.append((opened, at))
            opened = -1
        else:
            text.append(part)
            at += len(part)
    return "".join(text), spans


def marks_asked() -> tuple[str, str]:
    """What to ask the index to mark a match with (see `spans_of_marked`)."""
    return _START, _END


def highlighted(
    manifest: Manifest,
    hits: Sequence[Hit],
    parsed: ParsedQuery,
    corrected: Sequence[str],
    cut: bool,
) -> list[Hit]:
    """The hits with the ranges of the query's terms in their text (with `cut`, their
    snippets instead of their text): the words where the words index matched them (the
    `corrected` terms a typo's corrections added too), unspaced runs where they occur."""
    ids = {h.id: [str(i) for i in h.parts.get("merged", [h.id])] for h in hits}
    every = [i for chunk_ids in ids.values() for i in chunk_ids]
    match = " OR ".join(p for p in (parsed.word_match(), *corrected) if p)
    marked = manifest.keyword.marked(match, every, *marks_asked())
    # A merged hit's text is its passages' joined (as in `ranking._hits`): their own texts
    # say where each begins.
    several = [i for chunk_ids in ids.values() if len(chunk_ids) > 1 for i in chunk_ids]
    texts = manifest.notes.chunks_by_id(several) if several else {}
    out: list[Hit] = []
    for hit in hits:
        spans: list[Span] = []
        at = 0
        for chunk_id in ids[hit.id]:
            record = texts.get(chunk_id)
            raw = hit.text if len(ids[hit.id]) == 1 else record.chunk.text if record else ""
            if chunk_id in marked:
                text, found = spans_of_marked(marked[chunk_id])
                # Unless the passage holds the marker characters itself, or changed since.
                if text == raw and hit.text.startswith(raw, at):
                    spans += [(s + at, e + at) for s, e in found]
            at += len(raw) + 2  # the "\n\n" between merged passages
        spans += unspaced_spans(hit.text, parsed.unspaced)
        if cut:
            shown, ranges = snippet(hit.text, spans)
            out.append(replace(hit, snippet=shown, highlights=tuple(ranges)))
        else:
            out.append(replace(hit, highlights=tuple(merged(spans))))
    return out


def unspaced_spans(text: str, runs: Iterable[str]) -> list[Span]:
    """Where each run of unspaced-script characters occurs in `text`; a run that does not
    occur whole is looked for as its pairs of characters (as the pairs index matched it)."""
    lowered = text.lower()
    # Matched without case where lowering keeps every offset (it nearly always does).
    hay = lowered if len(lowered) == len(text) else text
    spans: list[Span] = []
    for run in runs:
        needle = run.lower() if hay is lowered else run
        found = _occurrences(hay, needle)
        if not found and len(needle) > 2:
            pairs = (needle[i : i + 2] for i in range(len(needle) - 1))
            found = [span for pair in pairs for span in _occurrences(hay, pair)]
        spans += found
    return spans


def _occurrences(text: str, needle: str) -> list[Span]:
    if not needle:
        return []
    out: list[Span] = []
    start = text.find(needle)
    while start >= 0:
        out.append((start, start + len(needle)))
        start = text.find(needle, start + len(needle))
    return out


def merged(spans: Iterable[Span]) -> list[Span]:
    """Spans sorted, overlapping and touching ones joined."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def snippet(text: str, spans: Sequence[Span], limit: int = SNIPPET_CHARS) -> tuple[str, list[Span]]:
    """The part of `text` with the most matches, about `limit` characters, and where the
    matches are in it (spans of `text` outside it left out, those across its ends cut)."""
    spans = merged(spans)
    start, end = _window(text, spans, limit)
    head = ELLIPSIS if start > 0 else ""
    tail = ELLIPSIS if end < len(text.rstrip()) else ""
    # Blank space at an end without an ellipsis goes, as a snippet starts at its first word.
    if not head:
        start += len(text[start:end]) - len(text[start:end].lstrip())
    if not tail:
        end = start + len(text[start:end].rstrip())
    shift = len(head) - start
    found = [
        (max(s, start) + shift, min(e, end) + shift) for s, e in spans if s < end and e > start
    ]
    return head + text[start:end] + tail, found


def bolded(text: str, spans: Sequence[Span]) -> str:
    """`text` with `spans` in Markdown bold: only for a text whose own emphasis markup was
    taken out first (an unlinked mention's line), where a `**` can be nothing else."""
    out: list[str] = []
    at = 0
    for start, end in merged(spans):
        out += [text[at:start], "**", text[start:end], "**"]
        at = end
    return "".join(out) + text[at:]


def _window(text: str, spans: Sequence[Span], limit: int) -> Span:
    """Where the snippet starts and ends: whole lines around the line with the most marks
    while they fit, else a cut of that line around its first mark."""
    lines: list[Span] = []
    at = 0
    for line in text.split("\n"):
        lines.append((at, at + len(line)))
        at += len(line) + 1
    if not spans:
        first = next((i for i, (s, e) in enumerate(lines) if text[s:e].strip()), 0)
        best = first
    else:
        counts = [sum(1 for s, e in spans if ls <= s < le + 1) for ls, le in lines]
        best = max(range(len(lines)), key=lambda i: (counts[i], -i))
    start, end = lines[best]
    if end - start > limit:
        mark = next((s for s, _ in spans if start <= s <= end), start)
        start = _word_start(text, max(start, mark - limit // 3))
        return start, _word_end(text, min(end, start + limit))
    below, above = best + 1, best - 1
    while True:
        grew = False
        if below < len(lines) and lines[below][1] - start <= limit:
            end = lines[below][1]
            below += 1
            grew = True
        if above >= 0 and end - lines[above][0] <= limit and spans:
            start = lines[above][0]
            above -= 1
            grew = True
        if not grew:
            break
    return start, end


def _word_start(text: str, at: int) -> int:
    space = text.rfind(" ", 0, at)
    return at if space < 0 or at - space > 20 else space + 1


def _word_end(text: str, at: int) -> int:
    space = text.find(" ", at)
    return at if space < 0 or space - at > 20 else space
