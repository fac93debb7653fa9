"""Token counts from words are the tokenizer's own: for the default model (BERT's WordPiece) a
text of printable ASCII is counted from its words, each word encoded once, and must give what
encoding the whole text gives, for every line and paragraph of real vaults and source trees;
anything else (control characters, [MASK], accents, CJK) is left to the tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import shared_path
from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter, load_tokenizer


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter.for_spec(default_spec())


@pytest.fixture(scope="module")
def reference() -> TokenCounter:
    """Every count and cut from the tokenizer itself."""
    return TokenCounter(load_tokenizer(default_spec()), by_words=False)


def encoded(counter: TokenCounter, texts: list[str]) -> list[int]:
    """The tokenizer's own count of each text, whole."""
    return [counter.count(text) for text in texts]


EDGES = [
    "",
    " ",
    "def render(self) -> None:  # draws the widget",
    "\tindented\twith tabs\r",
    "getElementById(id).innerHTML = `<b>${name}</b>`;",
    "a\x0cb and c\x0bd: control characters the normaliser deletes",
    "x = [MASK] and [cls] or [SEP]",
    "[MASK]",
    "café, naïve, Übermaß",
    "日本語のテキスト and English",
    "a" * 150 + " is longer than a word may be",
    "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
    "0x1F 3.14159 1e-9 42L",
]


def test_edge_cases_count_as_the_tokenizer_counts(counter: TokenCounter) -> None:
    assert counter.count_many(EDGES) == encoded(counter, EDGES)
    # Counted again (every word now known), the same.
    assert counter.count_many(EDGES) == encoded(counter, EDGES)


#: Budgets of a cut: the chunker's (about 230), small ones that cut inside words.
BUDGETS = (1, 2, 3, 8, 50, 230)


def test_edge_cases_cut_as_the_tokenizer_cuts(
    counter: TokenCounter, reference: TokenCounter
) -> None:
    long = " ".join(EDGES) * 5 + " getElementById " * 40 + "x" * 120
    for text in [*EDGES, long]:
        for budget in BUDGETS:
            assert counter.cut(text, budget) == reference.cut(text, budget), (text, budget)


def test_the_word_memory_starts_again_past_its_cap(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultd.embedding import tokens

    monkeypatch.setattr(tokens, "_MAX_WORDS", 3)
    texts = [f"word{i} other{i} third{i}" for i in range(20)]
    assert counter.count_many(texts) == encoded(counter, texts)


def texts_of(root: Path, limit: int) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.stat().st_size < 1_000_000:
            try:
                found.append(path.read_bytes().decode("utf-8"))
            except UnicodeDecodeError:
                continue
        if len(found) >= limit:
            break
    return found


@pytest.mark.corpus
@pytest.mark.parametrize(
    "corpus", ["code", "obsidian-help/en", "obsidian-help/zh", "kepano-obsidian"]
)
def test_every_line_and_paragraph_of_real_files_counts_as_the_tokenizer_counts(
    counter: TokenCounter, reference: TokenCounter, corpus: str
) -> None:
    files = texts_of(shared_path("corpora", *corpus.split("/")), 400)
    lines = list(dict.fromkeys(line for text in files for line in text.split("\n")))
    paragraphs = list(dict.fromkeys(p for text in files for p in text.split("\n\n")))
    for texts in (lines, paragraphs):
        counted = counter.count_many(texts)
        expected = encoded(counter, texts)
        wrong = [t for t, a, b in zip(texts, counted, expected, strict=True) if a != b]
        assert not wrong, wrong[:5]
    # The longest paragraphs (minified lines among them), cut as the tokenizer cuts them.
    for text in sorted(paragraphs, key=len)[-40:]:
        for budget in BUDGETS[2:]:
            assert counter.cut(text, budget) == reference.cut(text, budget), (text[:80], budget)
