"""A parsed `Note` becomes heading-aware `Chunk`s that fit the embedder's token budget.

Rules (also in docs/parsing.md):
- A chunk never spans two sections; its `section` is the heading path (`Setup > Docker`).
- Consecutive blocks of a section are packed until the budget is reached. The budget counts
  the embedded text: the `title > section` line, a blank line, the chunk text, and the model's
  special tokens.
- A block is split only when it alone exceeds the budget: by lines, then sentences, then tokens.
  A split code fence is reopened with its language, a split table repeats its header rows and
  a split callout repeats its title line, so every chunk is well-formed Markdown.
- Headings are context, not content: a heading with nothing under it before its first
  subheading produces no chunk of its own; its text lives on in the section path of the chunks
  below it.
- Thematic breaks, comments and link definitions are not content either.
- A block with an identity of its own (a canvas card, a PDF page, a source symbol: see
  `records.Location`) is never packed with its neighbours: it is one chunk when it fits, and
  when it does not, a line window of about 90% of the budget (`WINDOW_SHARE`) cuts it without
  overlap, each piece keeping the block's location. A block that gives its own heading path
  (`Block.headings`: a canvas group's label, a PDF outline's headings) is in that section.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from vaultd.records import NOWHERE, Block, Chunk, Location, Note

DEFAULT_MAX_TOKENS = 256
#: Chunks kept of one file by default (`[chunking] max_chunks`): a file past it is indexed in
#: part (its first chunks), with the reason in its errors.
DEFAULT_MAX_CHUNKS = 10_000
#: The prefix never takes more than this share of the budget; a longer one is cut.
MAX_PREFIX_SHARE = 0.5
#: An oversize block with an identity is cut into line windows of this share of the budget:
#: the margin keeps a window that ends on a long line inside the budget without a second cut.
WINDOW_SHARE = 0.9

_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？；])\s+|(?<=[。！？；])")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


class Counter(Protocol):
    """Token counting in the embedding model's tokenizer (see vaultd.embedding.tokens)."""

    special_tokens: int
    #: Counts of whitespace-joined texts add up (see TokenCounter.additive).
    additive: bool

    def count(self, text: str, *, special: bool = False) -> int: ...

    def count_many(self, texts: list[str]) -> list[int]: ...

    def cut(self, text: str, budget: int) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class _Piece:
    """Text ready to pack: a whole block or part of a split one."""

    start_line: int
    end_line: int
    text: str
    tokens: int
    location: Location = NOWHERE


def chunk_id(path: str, index: int) -> str:
    """Stable across runs and machines for the same vault path and position."""
    return hashlib.sha256(f"{path}\x00{index}".encode()).hexdigest()[:32]


def context_line(title: str, headings: Sequence[str]) -> str:
    """`title > section`, without repeating an H1 that merely restates the title."""
    parts = [title]
    parts.extend(h for i, h in enumerate(headings) if not (i == 0 and h == title))
    return " > ".join(p for p in parts if p)


def chunk_note(
    note: Note,
    counter: Counter,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    limit: int | None = None,
) -> list[Chunk]:
    """Split a note into chunks whose embedded text fits `max_tokens`: its first `limit`
    chunks when given (a caller keeping N asks for N + 1 to know whether there were more)."""
    sections = _sections(note.blocks)

    # One tokenizer call for every block and one for every context line of the note: the
    # per-call overhead, not the encoding, is most of the cost for short texts.
    counts = iter(counter.count_many([b.text for _, blocks in sections for b in blocks]))
    contexts = [context_line(note.title, headings) for headings, _ in sections]
    context_counts = counter.count_many(contexts)

    chunks: list[Chunk] = []
    for (headings, blocks), context, context_tokens in zip(
        sections, contexts, context_counts, strict=True
    ):
        context, context_tokens = _fit_context(context, context_tokens, counter, max_tokens)
        prefix = context + "\n\n"
        prefix_tokens = (
            context_tokens + counter.special_tokens
            if counter.additive
            else counter.count(prefix, special=True)
        )
        budget = max_tokens - prefix_tokens
        block_counts = [next(counts) for _ in blocks]
        for piece in _pack(_pieces(blocks, block_counts, counter, budget), budget):
            embed_text = prefix + piece.text
            # Packing adds counts, which is exact for an additive tokenizer; for any other the
            # real count decides and the piece is cut further.
            tokens = (
                prefix_tokens + piece.tokens
                if counter.additive
                else counter.count(embed_text, special=True)
            )
            parts = [piece] if tokens <= max_tokens else _cut_piece(piece, counter, budget)
            for part in parts:
                embed_text = prefix + part.text
                if part is not piece:
                    tokens = counter.count(embed_text, special=True)
                index = len(chunks)
                chunks.append(
                    Chunk(
                        id=chunk_id(note.path, index),
                        index=index,
                        section=" > ".join(headings),
                        headings=headings,
                        start_line=part.start_line,
                        end_line=part.end_line,
                        text=part.text,
                        embed_text=embed_text,
                        tokens=tokens,
                        hash=hashlib.sha256(embed_text.encode()).hexdigest(),
                        context=context,
                        location=part.location,
                    )
                )
                if limit is not None and len(chunks) >= limit:
                    return chunks
    return chunks


def capped(
    note: Note, counter: Counter, max_tokens: int, max_chunks: int
) -> tuple[Note, list[Chunk]]:
    """The note's first `max_chunks` chunks, and the note with the reason in its errors when
    it had more (indexed in part, as `status` shows)."""
    chunks = chunk_note(note, counter, max_tokens, limit=max_chunks + 1)
    if len(chunks) <= max_chunks:
        return note, chunks
    reason = f"only its first {max_chunks} chunks are indexed (max_chunks)"
    return replace(note, errors=(*note.errors, reason)), chunks[:max_chunks]


def _sections(blocks: Sequence[Block]) -> list[tuple[tuple[str, ...], list[Block]]]:
    """The blocks grouped by the section they are in, each group with its heading path."""
    sections: list[tuple[tuple[str, ...], list[Block]]] = []
    stack: list[tuple[int, str]] = []
    current: list[Block] = []

    def section_of(group: list[Block]) -> tuple[str, ...]:
        # An extractor's block names its own section; a Markdown block is under the headings
        # above it.
        given = group[0].headings
        return given if given is not None else tuple(h for _, h in stack)

    for block in blocks:
        if block.headings is not None:
            # A new section whenever the heading path an extractor gives changes.
            if current and current[0].headings != block.headings:
                sections.append((section_of(current), current))
                current = []
            current.append(block)
        elif block.kind == "heading":
            if current:
                sections.append((section_of(current), current))
                current = []
            while stack and stack[-1][0] >= block.level:
                stack.pop()
            stack.append((block.level, block.info))
        else:
            if current and current[0].headings is not None:
                sections.append((section_of(current), current))
                current = []
            current.append(block)
    if current:
        sections.append((section_of(current), current))
    return sections


def _fit_context(context: str, tokens: int, counter: Counter, max_tokens: int) -> tuple[str, int]:
    limit = int(max_tokens * MAX_PREFIX_SHARE) - counter.special_tokens
    if tokens <= limit:
        return context, tokens
    context = counter.cut(context, limit)[0]
    return context, counter.count(context)


def _pieces(blocks: list[Block], counts: list[int], counter: Counter, budget: int) -> list[_Piece]:
    pieces: list[_Piece] = []
    for block, tokens in zip(blocks, counts, strict=True):
        location = block.location
        if tokens <= budget:
            pieces.append(_Piece(block.start_line, block.end_line, block.text, tokens, location))
        elif location.identity:
            # A card, a page or a symbol: line windows of WINDOW_SHARE of the budget, no
            # overlap, each keeping the block's location.
            pieces.extend(_split_block(block, counter, budget, window=True))
        else:
            pieces.extend(_split_block(block, counter, budget))
    return pieces


def _pack(pieces: list[_Piece], budget: int) -> list[_Piece]:
    packed: list[_Piece] = []
    group: list[_Piece] = []
    total = 0
    for piece in pieces:
        if piece.location.identity:
            # A card, a page or a symbol is a passage of its own.
            if group:
                packed.append(_join(group, total))
                group, total = [], 0
            packed.append(piece)
            continue
        if group and total + piece.tokens > budget:
            packed.append(_join(group, total))
            group, total = [], 0
        group.append(piece)
        total += piece.tokens
    if group:
        packed.append(_join(group, total))
    return packed


def _join(group: list[_Piece], total: int) -> _Piece:
    if len(group) == 1:
        return group[0]
    return _Piece(
        group[0].start_line, group[-1].end_line, "\n\n".join(p.text for p in group), total
    )


# -- splitting one oversized block ---------------------------------------------------------------


def _frame(block: Block) -> tuple[list[str], list[str], list[tuple[int, str]]]:
    """A block's repeated header lines, footer lines and its numbered body lines."""
    lines = block.text.split("\n")
    numbered = list(enumerate(lines, start=block.start_line))
    if block.kind == "code":
        opener = _FENCE.match(lines[0])
        if opener:
            fence = opener.group(1)
            closed = len(lines) > 1 and lines[-1].strip().startswith(fence)
            body = numbered[1:-1] if closed else numbered[1:]
            # An unclosed fence still becomes well-formed pieces.
            return [lines[0]], [lines[-1] if closed else fence], body
    if block.kind == "table" and len(lines) > 2:
        return lines[:2], [], numbered[2:]
    if block.kind == "quote" and re.match(r"^\s*>\s*\[!", lines[0]) and len(lines) > 1:
        return [lines[0]], [], numbered[1:]
    return [], [], numbered


def _split_block(
    block: Block, counter: Counter, budget: int, *, window: bool = False
) -> list[_Piece]:
    """An oversize block by lines (a line too long by sentences, then tokens); its frame
    (a fence, a table's header) repeated in each piece, or, as a `window`, no frame and a
    room of WINDOW_SHARE of the budget."""
    header, footer, body = _frame(block)
    frame_tokens = counter.count("\n".join(header + footer)) if header or footer else 0
    room = budget - frame_tokens
    if window:
        header, footer, frame_tokens = [], [], 0
        body = list(enumerate(block.text.split("\n"), start=block.start_line))
        room = max(1, int(budget * WINDOW_SHARE))
    elif room < max(8, budget // 4):
        # The frame itself is too big to repeat (a huge table header): split without it.
        header, footer, room, frame_tokens = [], [], budget, 0
        body = list(enumerate(block.text.split("\n"), start=block.start_line))

    units: list[tuple[int, str, int]] = []  # (line number, text, tokens)
    counts = counter.count_many([text for _, text in body])
    for (number, text), tokens in zip(body, counts, strict=True):
        if not text.strip():
            units.append((number, text, 0))
        elif tokens <= room:
            units.append((number, text, tokens))
        else:
            units.extend((number, part, n) for part, n in _split_line(text, counter, room))

    pieces: list[_Piece] = []
    group: list[tuple[int, str, int]] = []
    total = 0

    def flush() -> None:
        lines = [text for _, text, _ in group]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if lines:
            numbers = [n for n, text, _ in group if text.strip()]
            pieces.append(
                _Piece(
                    numbers[0],
                    numbers[-1],
                    "\n".join(header + lines + footer),
                    total + frame_tokens,
                    block.location,
                )
            )

    for unit in units:
        if group and total + unit[2] > room:
            flush()
            group, total = [], 0
        group.append(unit)
        total += unit[2]
    if group:
        flush()
    return pieces


def _split_line(text: str, counter: Counter, room: int) -> list[tuple[str, int]]:
    """One line that alone exceeds the budget: by sentences, then by tokens."""
    cuts = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
    sentences = [text[a:b] for a, b in itertools.pairwise(cuts) if text[a:b].strip()]
    counts = counter.count_many(sentences)
    parts: list[tuple[str, int]] = []
    group = ""
    total = 0
    for sentence, tokens in zip(sentences, counts, strict=True):
        if tokens > room:
            if group.strip():
                parts.append((group.strip(), total))
            group, total = "", 0
            parts.extend((p, counter.count(p)) for p in counter.cut(sentence, room))
            continue
        if group.strip() and total + tokens > room:
            parts.append((group.strip(), total))
            group, total = "", 0
        group += sentence
        total += tokens
    if group.strip():
        parts.append((group.strip(), total))
    return parts


def _cut_piece(piece: _Piece, counter: Counter, budget: int) -> list[_Piece]:
    """Last resort for tokenizers whose counts do not add up across joins."""
    parts: list[_Piece] = []
    limit = budget
    while limit > 0:
        texts = counter.cut(piece.text, limit)
        if all(counter.count(t) <= budget for t in texts):
            parts = [
                _Piece(piece.start_line, piece.end_line, t, counter.count(t), piece.location)
                for t in texts
            ]
            break
        limit = int(limit * 0.8)
    return parts
