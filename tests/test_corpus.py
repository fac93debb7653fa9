"""Every note of the shared real-world vaults parses and chunks within the rules."""

from __future__ import annotations

import re
import time

import pytest

from tests.conftest import shared_path
from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import NoteError
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.parse import decode, parse_note

VAULTS = [
    ("corpora", "obsidian-help", "en"),
    ("corpora", "obsidian-help", "zh"),
    ("corpora", "obsidian-help", "Sandbox"),
    ("corpora", "kepano-obsidian"),
    ("corpora", "obsidian-hub"),
]
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_CODE_TAG = re.compile(r"(?<![^\s])#([\w/\-]+)")


def _code_only_tags(text: str) -> set[str]:
    """Tags that appear in a note only inside fenced code."""
    inside: set[str] = set()
    outside: set[str] = set()
    fence = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            continue
        if fence is not None and line.strip().startswith(fence):
            fence = None
            continue
        target = inside if fence else outside
        target.update(t.lower() for t in _CODE_TAG.findall(line))
    return inside - outside


@pytest.mark.corpus
@pytest.mark.parametrize("vault", VAULTS, ids=lambda v: "/".join(v[1:]))
def test_every_note_parses_and_chunks(vault: tuple[str, ...], counter: TokenCounter) -> None:
    root = shared_path(*vault)
    budget = 256
    notes = chunks = tokens = 0
    ids: set[str] = set()
    started = time.perf_counter()
    for file in sorted(root.rglob("*.md")):
        rel = file.relative_to(root).as_posix()
        data = file.read_bytes()
        try:
            note = parse_note(rel, data)
        except NoteError:
            continue
        text, _ = decode(data, rel)
        lines = text.split("\n")
        notes += 1
        for link in note.links:
            assert link.target and "\n" not in link.target and "]]" not in link.target, link
        for tag in _code_only_tags(note.body):
            assert tag not in note.tags, f"{rel}: tag {tag!r} only appears in code"
        for chunk in chunk_note(note, counter, budget):
            chunks += 1
            tokens += chunk.tokens
            assert chunk.id not in ids, f"{rel}: duplicate chunk id"
            ids.add(chunk.id)
            real = counter.count(chunk.embed_text, special=True)
            assert real == chunk.tokens and real <= budget, f"{rel}#{chunk.index}: {real} tokens"
            assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), (rel, chunk.index)
            window = "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
            for line in chunk.text.split("\n"):
                # Repeated fence/table/callout header lines come from earlier in the file.
                assert line.strip() in window or line in lines, (rel, chunk.index, line)
            assert chunk.embed_text.endswith(chunk.text)
    elapsed = time.perf_counter() - started
    print(
        f"\n{'/'.join(vault[1:])}: {notes} notes, {chunks} chunks, {tokens} tokens, {elapsed:.1f} s"
    )
    assert notes > 0
