"""Chunking rules of issue 2: a parsed note becomes heading-aware chunks within the token budget.

Budgets are checked with the real all-MiniLM-L6-v2 tokenizer (the session `counter`), counting
the embedded text with its special tokens, exactly as the embedder will see it.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable

import pytest

from vaultd.embedding.tokens import TokenCounter
from vaultd.pipeline.chunk import _split_block, chunk_id, chunk_note, context_line
from vaultd.pipeline.parse import parse_note
from vaultd.records import Block, Chunk

BUDGETS = [64, 128, 256]


def chunks_of(
    text: str, counter: TokenCounter, max_tokens: int = 256, path: str = "note.md"
) -> list[Chunk]:
    return chunk_note(parse_note(path, text.encode("utf-8")), counter, max_tokens)


def assert_well_formed(chunks: list[Chunk], text: str, counter: TokenCounter, budget: int) -> None:
    """Budget, indices, and every chunk line drawn from its 1-based inclusive line range."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        real = counter.count(chunk.embed_text, special=True)
        assert real == chunk.tokens <= budget, (chunk.index, real)
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        window = lines[chunk.start_line - 1 : chunk.end_line]
        joined = "\n".join(window)
        for line in chunk.text.split("\n"):
            # Repeated fence, table-header and callout lines come from just above the range.
            assert line.strip() in joined or line in lines, (chunk.index, line)


def fence_balanced(text: str) -> bool:
    return len(re.findall(r"^\s*(?:```|~~~)", text, flags=re.MULTILINE)) % 2 == 0


# A note that exercises every block kind, long enough to need several chunks at small budgets.
MIXED = "\n".join(
    [
        "---",
        "title: Mixed",
        "tags: [demo]",
        "---",
        "# Mixed",
        "",
        "Intro paragraph that says what the note is about, briefly and plainly.",
        "",
        "## Setup",
        "",
        " ".join(f"Step {i} explains one thing in a few words." for i in range(30)),
        "",
        "```bash",
        *(f"run-command --flag value-{i} --other {i}" for i in range(40)),
        "```",
        "",
        "### Docker",
        "",
        "| option | meaning |",
        "| --- | --- |",
        *(f"| opt{i} | what option {i} does |" for i in range(40)),
        "",
        "> [!warning] Careful",
        *(f"> Warning line {i} with a few words of advice." for i in range(30)),
        "",
        "## 中文",
        "",
        "".join(f"这是第{i}个句子，用来测试分块。" for i in range(60)),
        "",
        "- item " + " ".join(["word"] * 400),
        "",
    ]
)


# -- sections ------------------------------------------------------------------------------------


def test_chunk_never_spans_two_sections(counter: TokenCounter) -> None:
    text = "# A\n\nalpha\n\n## B\n\nbeta\n\n## C\n\ngamma\n\n# D\n\ndelta\n"
    chunks = chunks_of(text, counter)
    assert [(c.section, c.start_line, c.end_line, c.text) for c in chunks] == [
        ("A", 3, 3, "alpha"),
        ("A > B", 7, 7, "beta"),
        ("A > C", 11, 11, "gamma"),
        ("D", 15, 15, "delta"),
    ]


def test_section_path_deeper_appends_shallower_resets(counter: TokenCounter) -> None:
    text = "# A\nt1\n## B\nt2\n### C\nt3\n## D\nt4\n#### E\nt5\n# F\nt6\n### G\nt7\n"
    assert [c.headings for c in chunks_of(text, counter)] == [
        ("A",),
        ("A", "B"),
        ("A", "B", "C"),
        ("A", "D"),
        ("A", "D", "E"),
        ("F",),
        ("F", "G"),
    ]
    assert [c.section for c in chunks_of(text, counter)][2] == "A > B > C"


def test_text_before_any_heading_has_empty_section(counter: TokenCounter) -> None:
    chunks = chunks_of("Preamble.\n\n## Later\n\nbody\n", counter)
    assert (chunks[0].section, chunks[0].headings) == ("", ())
    assert chunks[0].embed_text == "note\n\nPreamble."


def test_setext_headings_make_sections(counter: TokenCounter) -> None:
    chunks = chunks_of("Top\n===\n\nt1\n\nSub\n---\n\nt2\n", counter)
    assert [(c.section, c.start_line) for c in chunks] == [("Top", 4), ("Top > Sub", 9)]


# -- lines and text ------------------------------------------------------------------------------


def test_lines_are_one_based_inclusive_in_the_original_file(counter: TokenCounter) -> None:
    text = "---\ntitle: T\naliases: [x]\n---\n\n# H\n\nfirst line\nsecond line\n\n- a\n- b\n"
    (chunk,) = chunks_of(text, counter)
    lines = text.split("\n")
    assert (chunk.start_line, chunk.end_line) == (8, 12)
    assert lines[chunk.start_line - 1] == "first line"
    assert lines[chunk.end_line - 1] == "- b"
    assert chunk.text == "first line\nsecond line\n\n- a\n- b"


@pytest.mark.parametrize("budget", BUDGETS)
def test_text_drawn_from_its_lines(counter: TokenCounter, budget: int) -> None:
    chunks = chunks_of(MIXED, counter, budget)
    assert len(chunks) > 5
    assert_well_formed(chunks, MIXED, counter, budget)


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda s: s.replace("\n", "\r\n"), id="crlf"),
        pytest.param(lambda s: s.replace("\n", "\r"), id="cr-only"),
        pytest.param(lambda s: "\ufeff" + s.replace("\n", "\r\n"), id="bom-crlf"),
    ],
)
def test_line_endings_give_same_chunks_as_lf(
    counter: TokenCounter, variant: Callable[[str], str]
) -> None:
    lf = chunks_of(MIXED, counter, 128)
    other = chunks_of(variant(MIXED), counter, 128)
    assert [(c.start_line, c.end_line, c.text, c.id, c.hash) for c in other] == [
        (c.start_line, c.end_line, c.text, c.id, c.hash) for c in lf
    ]


# -- ids, hashes and the embedded text -----------------------------------------------------------


def test_ids_deterministic_for_same_path_and_position(counter: TokenCounter) -> None:
    first = chunks_of(MIXED, counter, 128, path="dir/a.md")
    second = chunks_of(MIXED, counter, 128, path="dir/a.md")
    assert [c.id for c in first] == [c.id for c in second]
    assert len({c.id for c in first}) == len(first)
    assert all(c.id == chunk_id("dir/a.md", c.index) for c in first)


def test_ids_differ_by_path(counter: TokenCounter) -> None:
    a = chunks_of(MIXED, counter, 128, path="a.md")
    b = chunks_of(MIXED, counter, 128, path="b.md")
    assert not {c.id for c in a} & {c.id for c in b}


def test_id_is_positional_and_hash_follows_content(counter: TokenCounter) -> None:
    (before,) = chunks_of("# H\n\nold text\n", counter)
    (after,) = chunks_of("# H\n\nnew text\n", counter)
    assert before.id == after.id
    assert before.hash != after.hash


def test_id_scheme_is_pinned() -> None:
    # Stored vectors are keyed by this id: changing the scheme silently orphans every index.
    assert chunk_id("notes/a.md", 0) == hashlib.sha256(b"notes/a.md\x000").hexdigest()[:32]
    assert re.fullmatch(r"[0-9a-f]{32}", chunk_id("日本/ノート.md", 12))


def test_content_hash_is_sha256_of_embed_text(counter: TokenCounter) -> None:
    for chunk in chunks_of(MIXED, counter, 128):
        assert chunk.hash == hashlib.sha256(chunk.embed_text.encode("utf-8")).hexdigest()


def test_embed_text_is_context_blank_line_text(counter: TokenCounter) -> None:
    chunks = chunks_of("---\ntitle: Guide\n---\n# Setup\n\n## Docker\n\nRun it.\n", counter)
    assert [c.embed_text for c in chunks] == ["Guide > Setup > Docker\n\nRun it."]


def test_h1_equal_to_title_is_not_repeated(counter: TokenCounter) -> None:
    (chunk,) = chunks_of("# Guide\n\n## Docker\n\nRun it.\n", counter)
    assert chunk.section == "Guide > Docker"
    assert chunk.embed_text == "Guide > Docker\n\nRun it."
    assert context_line("Guide", ("Guide", "Docker")) == "Guide > Docker"
    assert context_line("Guide", ("Other", "Guide")) == "Guide > Other > Guide"


# -- budget --------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_chunk_within_budget(counter: TokenCounter, budget: int) -> None:
    chunks = chunks_of(MIXED, counter, budget)
    for chunk in chunks:
        assert counter.count(chunk.embed_text, special=True) <= budget


@pytest.mark.parametrize("budget", BUDGETS)
def test_long_title_and_headings_still_fit(counter: TokenCounter, budget: int) -> None:
    long = " ".join(["verbose"] * 300)
    text = f"---\ntitle: {long}\n---\n# {long}\n\n## {long}\n\nShort body.\n"
    (chunk,) = chunks_of(text, counter, budget)
    assert counter.count(chunk.embed_text, special=True) <= budget
    assert chunk.text == "Short body."


# -- packing and splitting -----------------------------------------------------------------------


def test_consecutive_small_blocks_are_packed(counter: TokenCounter) -> None:
    text = "# H\n\nOne.\n\n- a\n- b\n\n```\ncode\n```\n\n| x |\n| - |\n| 1 |\n\n> quote\n"
    (chunk,) = chunks_of(text, counter)
    assert (chunk.start_line, chunk.end_line) == (3, 16)
    assert chunk.text == "One.\n\n- a\n- b\n\n```\ncode\n```\n\n| x |\n| - |\n| 1 |\n\n> quote"


def test_blocks_within_budget_are_never_split(counter: TokenCounter) -> None:
    paragraphs = [f"Paragraph {i} has a handful of ordinary words in it." for i in range(30)]
    text = "# H\n\n" + "\n\n".join(paragraphs) + "\n"
    chunks = chunks_of(text, counter, 64)
    assert len(chunks) > 1
    pieces = [p for c in chunks for p in c.text.split("\n\n")]
    assert pieces == paragraphs
    assert_well_formed(chunks, text, counter, 64)


def test_oversized_block_split_by_lines(counter: TokenCounter) -> None:
    items = [f"- item {i} with a few words" for i in range(60)]
    text = "# H\n\n" + "\n".join(items) + "\n"
    chunks = chunks_of(text, counter, 64)
    assert len(chunks) > 1
    # Whole lines only, in order, each in one chunk, with contiguous line ranges.
    assert [line for c in chunks for line in c.text.split("\n")] == items
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.start_line == prev.end_line + 1
    assert_well_formed(chunks, text, counter, 64)


def test_oversized_line_split_by_sentences(counter: TokenCounter) -> None:
    sentences = [f"Sentence number {i} says something short." for i in range(60)]
    line = " ".join(sentences)
    chunks = chunks_of(f"# H\n\n{line}\n", counter, 64)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text.startswith("Sentence number") and chunk.text.endswith("short.")
        assert (chunk.start_line, chunk.end_line) == (3, 3)
    assert " ".join(c.text for c in chunks) == line
    assert_well_formed(chunks, f"# H\n\n{line}\n", counter, 64)


def test_oversized_cjk_line_split_by_sentences(counter: TokenCounter) -> None:
    line = "".join(f"这是第{i}个句子，用来测试分块。" for i in range(80))
    chunks = chunks_of(f"# H\n\n{line}\n", counter, 64)
    assert len(chunks) > 1
    assert all(c.text.endswith("。") for c in chunks)
    assert "".join(c.text for c in chunks) == line


def test_oversized_sentence_split_by_tokens(counter: TokenCounter) -> None:
    words = [f"token{i}" for i in range(500)]
    line = " ".join(words)
    chunks = chunks_of(f"# H\n\n{line}\n", counter, 64)
    assert len(chunks) > 5
    assert " ".join(c.text for c in chunks).split() == words
    assert_well_formed(chunks, f"# H\n\n{line}\n", counter, 64)


@pytest.mark.parametrize(("fence", "info"), [("```", "python"), ("~~~", "js"), ("````", "")])
def test_split_code_fence_reopened_with_language(
    counter: TokenCounter, fence: str, info: str
) -> None:
    body = [f"value_{i} = compute({i}) + offset_{i}" for i in range(80)]
    text = "# H\n\n" + "\n".join([fence + info, *body, fence]) + "\n"
    chunks = chunks_of(text, counter, 64)
    assert len(chunks) > 1
    for chunk in chunks:
        lines = chunk.text.split("\n")
        assert lines[0] == fence + info and lines[-1] == fence
        assert chunk.start_line >= 4 and chunk.end_line <= 3 + len(body)
    assert [line for c in chunks for line in c.text.split("\n")[1:-1]] == body
    assert_well_formed(chunks, text, counter, 64)


def test_split_table_repeats_header_row(counter: TokenCounter) -> None:
    rows = [f"| row {i} | value {i} is described here |" for i in range(60)]
    text = "# H\n\n| name | value |\n| :--- | ---: |\n" + "\n".join(rows) + "\n"
    chunks = chunks_of(text, counter, 64)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text.startswith("| name | value |\n| :--- | ---: |\n| row ")
    assert [line for c in chunks for line in c.text.split("\n")[2:]] == rows
    assert_well_formed(chunks, text, counter, 64)


def test_split_callout_repeats_its_type_line(counter: TokenCounter) -> None:
    lines = [f"> Line {i} of the callout, with some words in it." for i in range(50)]
    text = "# H\n\n> [!tip] Remember this\n" + "\n".join(lines) + "\n"
    chunks = chunks_of(text, counter, 64)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text.startswith("> [!tip] Remember this\n> Line ")
    assert [line for c in chunks for line in c.text.split("\n")[1:]] == lines
    assert_well_formed(chunks, text, counter, 64)


def test_split_pieces_count_what_they_carry(counter: TokenCounter) -> None:
    # A callout title too long to repeat is not repeated, so its tokens must not be counted in
    # every piece: the chunker adds piece counts instead of encoding each chunk again.
    title = "> [!note] " + " ".join(f"word{i}" for i in range(40))
    lines = [f"> Line {i} of the callout." for i in range(60)]
    text = title + "\n" + "\n".join(lines)
    block = Block(kind="quote", text=text, start_line=1, end_line=61)
    pieces = _split_block(block, counter, 60)
    assert len(pieces) > 1
    for piece in pieces:
        assert piece.tokens == counter.count(piece.text) <= 60, piece.text


# -- no noise chunks -----------------------------------------------------------------------------


def test_heading_with_nothing_before_its_subheading_yields_no_chunk(
    counter: TokenCounter,
) -> None:
    chunks = chunks_of("# Title\n\n## Empty parent\n\n### Child\n\nContent.\n", counter)
    assert [(c.section, c.text) for c in chunks] == [("Title > Empty parent > Child", "Content.")]
    assert chunks[0].embed_text == "Title > Empty parent > Child\n\nContent."


def test_empty_sibling_and_trailing_headings_yield_no_chunk(counter: TokenCounter) -> None:
    chunks = chunks_of("## Empty\n\n## Full\n\nContent.\n\n## Trailing\n", counter)
    assert [c.section for c in chunks] == ["Full"]


def test_only_headings_comments_and_rules_give_zero_chunks(counter: TokenCounter) -> None:
    assert chunks_of("# A\n\n## B\n\n---\n\n%% hidden %%\n\n<!-- hidden -->\n", counter) == []


@pytest.mark.parametrize("text", ["", "\n\n   \n", "\r\n\r\n"])
def test_empty_note_gives_zero_chunks(counter: TokenCounter, text: str) -> None:
    note = parse_note("Empty One.md", text.encode())
    assert chunk_note(note, counter) == []
    assert note.title == "Empty One"


def test_frontmatter_only_note_gives_zero_chunks_but_keeps_title_and_tags(
    counter: TokenCounter,
) -> None:
    note = parse_note("f.md", b"---\ntitle: Only Meta\ntags: [Alpha, beta]\n---\n")
    assert chunk_note(note, counter) == []
    assert note.title == "Only Meta"
    assert note.tags == ("alpha", "beta")
