"""Hostile and broken notes: each gives a clear error or a bounded result, never a hang.

The rule under test: `parse_note` raises nothing but `NoteError` (the note is skipped), and
whatever it returns chunks within the budget. Timeouts are generous; they catch hangs, not speed.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import NoteError
from vaultd.pipeline import parse
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.parse import DEFAULT_MAX_BYTES, MAX_FRONTMATTER_BYTES, parse_note
from vaultd.records import Chunk, Note


def assert_within_budget(chunks: list[Chunk], counter: TokenCounter, budget: int) -> None:
    for chunk in chunks:
        assert counter.count(chunk.embed_text, special=True) == chunk.tokens <= budget


def parse_or_skip(data: bytes) -> Note | None:
    """The note, or None when it was skipped with a NoteError (any other exception fails)."""
    try:
        return parse_note("bad.md", data)
    except NoteError:
        return None


# -- encoding and binary content -----------------------------------------------------------------


def test_a_few_invalid_utf8_bytes_are_replaced_and_recorded(counter: TokenCounter) -> None:
    note = parse_note("latin.md", b"# Caf\xe9\n\nCaf\xe9 au lait, na\xefve #tag\n")
    assert any("invalid UTF-8" in e for e in note.errors)
    assert note.title == "Caf\ufffd"
    assert note.tags == ("tag",)
    (chunk,) = chunk_note(note, counter)
    assert chunk.text == "Caf\ufffd au lait, na\ufffdve #tag"


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(bytes(range(0x80, 0x100)) * 64, id="high-bytes"),
        pytest.param(("Äöü ß, schöne Grüße. " * 200).encode("latin-1"), id="latin-1"),
        pytest.param(b"ok " + b"\xff\xfe" * 4000, id="mostly-garbage"),
    ],
)
def test_mostly_undecodable_is_skipped(data: bytes) -> None:
    assert b"\x00" not in data
    with pytest.raises(NoteError, match="not UTF-8"):
        parse_note("garbage.md", data)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"text\x00more text\n", id="one-nul"),
        pytest.param(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), id="png"),
        pytest.param(random.Random(0).randbytes(4096) + b"\x00", id="random"),
        pytest.param("utf-16 text".encode("utf-16"), id="utf-16"),
    ],
)
def test_nul_bytes_and_binary_are_skipped(data: bytes) -> None:
    with pytest.raises(NoteError, match="binary"):
        parse_note("binary.md", data)


# -- size ----------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_50_mb_file_is_skipped_over_the_default_limit() -> None:
    data = b"# Big\n\n" + b"All work and no play. " * (50 * 1024 * 1024 // 22)
    assert len(data) > DEFAULT_MAX_BYTES
    with pytest.raises(NoteError, match="limit"):
        parse_note("big.md", data)


def test_max_bytes_is_configurable() -> None:
    with pytest.raises(NoteError, match="limit"):
        parse_note("small.md", b"x" * 2048, max_bytes=1024)
    assert parse_note("small.md", b"x" * 1024, max_bytes=1024).body == "x" * 1024


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "line",
    [
        pytest.param("word " * 200_000, id="words"),
        pytest.param("A short sentence. " * 60_000, id="sentences"),
        pytest.param("x" * 1_000_000, id="one-huge-word"),
    ],
)
def test_single_1_mb_line_gives_bounded_chunks(counter: TokenCounter, line: str) -> None:
    note = parse_note("line.md", f"# Long\n\n{line}\n".encode())
    chunks = chunk_note(note, counter, 256)
    assert chunks
    assert_within_budget(chunks, counter, 256)
    assert all(c.start_line == c.end_line == 3 for c in chunks)


# -- nesting -------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("- " * 5000 + "deep\n", id="list-one-line"),
        pytest.param("1. " * 5000 + "deep\n", id="ordered-list-one-line"),
        pytest.param("\n".join("  " * i + "- item" for i in range(5000)), id="list-indented"),
        pytest.param("> " * 5000 + "deep\n", id="quote-one-line"),
        pytest.param(">" * 5000 + " deep\n", id="quote-no-spaces"),
        pytest.param("\n".join(">" * i + " x" for i in range(1, 5001)), id="quote-per-line"),
        pytest.param("> - " * 2500 + "deep\n", id="quote-list-alternating"),
        pytest.param("[" * 5000 + "x" + "]" * 5000 + "\n", id="brackets"),
        pytest.param("*" * 5000 + "x" + "*" * 5000 + "\n", id="emphasis"),
    ],
)
def test_5000_deep_nesting_never_raises_anything_but_note_error(
    counter: TokenCounter, text: str
) -> None:
    note = parse_or_skip(text.encode())
    if note is not None:
        assert_within_budget(chunk_note(note, counter, 256), counter, 256)


def test_oversized_nesting_is_skipped_by_size_not_by_crash() -> None:
    # A 5,000-deep indented list is 25 MB of indentation: over the default limit.
    text = "\n".join("  " * i + "- item" for i in range(5000))
    with pytest.raises(NoteError, match="limit"):
        parse_note("deep.md", text.encode())


# -- unclosed fence ------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_unclosed_fence_gives_well_formed_chunks(counter: TokenCounter) -> None:
    body = [f"print('line {i} with #inside a tag-like word')" for i in range(300)]
    text = "# Code\n\nBefore #outside.\n\n```python\n" + "\n".join(body) + "\n"
    note = parse_note("fence.md", text.encode())
    assert note.tags == ("outside",)
    chunks = chunk_note(note, counter, 128)
    assert_within_budget(chunks, counter, 128)
    code = [c for c in chunks if "print(" in c.text]
    assert len(code) > 1
    for chunk in code:
        lines = chunk.text.split("\n")
        fences = [i for i, line in enumerate(lines) if re.match(r"^```", line)]
        assert len(fences) % 2 == 0, chunk.text
        assert lines[-1] == "```"
        assert "```python" in lines


# -- YAML ----------------------------------------------------------------------------------------

BILLION_LAUGHS = """---
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
tags: [bomb]
---
# Survivor

The body is still indexed #body.
"""


@pytest.mark.timeout(30)
def test_yaml_alias_bomb_is_recorded_and_body_indexed(counter: TokenCounter) -> None:
    note = parse_note("bomb.md", BILLION_LAUGHS.encode())
    assert note.frontmatter == {}
    assert any("YAML aliases" in e for e in note.errors)
    assert note.title == "Survivor"
    assert note.tags == ("body",)
    (chunk,) = chunk_note(note, counter)
    assert (chunk.start_line, chunk.text) == (15, "The body is still indexed #body.")


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system",
        "!!python/object/apply:subprocess.check_output",
        "!!python/name:os.system",
    ],
)
def test_python_yaml_tags_are_not_executed(tmp_path: Path, tag: str) -> None:
    marker = tmp_path / "executed"
    text = f"---\nx: {tag} [['touch', '{marker}']]\n---\nBody #kept.\n"
    note = parse_note("evil.md", text.encode())
    assert not marker.exists()
    assert note.frontmatter == {}
    assert any("frontmatter" in e for e in note.errors)
    assert note.tags == ("kept",)


def test_oversized_frontmatter_is_recorded_and_body_indexed() -> None:
    big = "\n".join(f"key{i}: {'v' * 60}" for i in range(MAX_FRONTMATTER_BYTES // 60))
    note = parse_note("big-yaml.md", f"---\n{big}\n---\nBody #kept.\n".encode())
    assert note.frontmatter == {}
    assert any("over the" in e for e in note.errors)
    assert note.tags == ("kept",)


def test_impossible_date_in_frontmatter_is_recorded() -> None:
    note = parse_note("date.md", b"---\ncreated: 2023-02-30\n---\nBody.\n")
    assert note.frontmatter == {}
    assert note.errors and note.errors[0].startswith("frontmatter:")


# -- many headings -------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_100k_headings_with_nothing_under_them_give_zero_chunks(counter: TokenCounter) -> None:
    text = "".join(f"## Heading {i}\n" for i in range(100_000))
    note = parse_note("headings.md", text.encode())
    assert chunk_note(note, counter) == []


@pytest.mark.timeout(120)
def test_100k_headings_with_some_content(counter: TokenCounter) -> None:
    text = "".join(
        f"## Heading {i}\n" + (f"Text under {i}.\n" if i % 100 == 0 else "") for i in range(100_000)
    )
    chunks = chunk_note(parse_note("headings.md", text.encode()), counter)
    assert len(chunks) == 1000
    assert chunks[-1].section == "Heading 99900"
    assert chunks[-1].text == "Text under 99900."


# -- nothing escapes -----------------------------------------------------------------------------


@pytest.mark.parametrize("error", [ValueError("boom"), RecursionError(), KeyError("k")])
def test_parser_failures_become_note_errors(
    monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    # Fault injection: a parser bug must cost one note, never the run.
    def broken(*args: object) -> Note:
        raise error

    monkeypatch.setattr(parse, "_parse_text", broken)
    with pytest.raises(NoteError, match=r"bug\.md"):
        parse_note("bug.md", b"anything")


def test_empty_file_is_a_note_with_no_chunks(counter: TokenCounter) -> None:
    note = parse_note("empty.md", b"")
    assert (note.title, note.errors) == ("empty", ())
    assert chunk_note(note, counter) == []
