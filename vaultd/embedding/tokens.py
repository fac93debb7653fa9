"""Counting and cutting text in the embedding model's own tokens.

The chunker budgets in these tokens so that what is embedded is never silently truncated by
the model; the embedder encodes with the same tokenizer.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer

from vaultd.embedding.spec import ModelSpec, verify
from vaultd.errors import ModelError


@lru_cache(maxsize=4)
def _load(path: Path, sha256: str) -> Tokenizer:
    verify(path, sha256)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception
        raise ModelError(f"cannot load tokenizer {path}: {exc}") from exc
    # The shipped file pads and truncates to 128 for training; we budget and batch ourselves.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def load_tokenizer(spec: ModelSpec) -> Tokenizer:
    """The model's tokenizer with padding and truncation off (shared, do not reconfigure)."""
    spec.require_onnx()
    return _load(spec.tokenizer_path, spec.tokenizer_sha256)


_ADDITIVE_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_ADDITIVE_NORMALIZERS = {
    "BertNormalizer",
    "Lowercase",
    "NFC",
    "NFD",
    "NFKC",
    "NFKD",
    "StripAccents",
}


def _splits_at_whitespace(tokenizer: Tokenizer) -> bool:
    pre = tokenizer.pre_tokenizer
    norm = tokenizer.normalizer
    return (
        pre is not None
        and type(pre).__name__ in _ADDITIVE_PRE_TOKENIZERS
        and (norm is None or type(norm).__name__ in _ADDITIVE_NORMALIZERS)
    )


#: A word as BERT's pre-tokenizer splits printable ASCII: a run of letters and digits, or one
#: punctuation mark (every ASCII symbol is one to it).
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+|[^\sA-Za-z0-9]")
#: Control characters, which BERT's normaliser deletes.
_CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"
#: Words remembered at most; past it the memory starts again.
_MAX_WORDS = 200_000


def _counts_by_word(tokenizer: Tokenizer) -> bool:
    """Whether a text of printable ASCII counts as the sum of its words' counts, each word
    counted alone: BERT's normaliser and pre-tokenizer before a WordPiece model, which reads
    each word by itself."""
    return (
        type(tokenizer.normalizer).__name__ == "BertNormalizer"
        and type(tokenizer.pre_tokenizer).__name__ == "BertPreTokenizer"
        and type(tokenizer.model).__name__ == "WordPiece"
    )


class TokenCounter:
    """Counts tokens as the model will see them."""

    def __init__(self, tokenizer: Tokenizer, *, by_words: bool = True) -> None:
        """`by_words=False`: every count and cut from the tokenizer itself (what the words'
        counts are held to)."""
        self._tokenizer = tokenizer
        # [CLS] and [SEP] for BERT-style models; whatever the post-processor adds otherwise.
        self.special_tokens = len(tokenizer.encode("", add_special_tokens=True).ids)
        #: Whether texts joined by whitespace count as the sum of their counts. True when the
        #: pre-tokenizer splits at whitespace and normalises character by character (BERT's
        #: WordPiece): no token spans a join, so the chunker can add counts instead of
        #: encoding every embedded text again. Byte-level BPE, whose tokens carry the space
        #: before them, is not additive.
        self.additive = _splits_at_whitespace(tokenizer)
        #: Each word's count, for a tokenizer that reads printable ASCII word by word (BERT's
        #: WordPiece): such a text is counted in Python from its words, each word encoded once
        #: in a process. Source code repeats its words (a corpus of 10 MB holds few distinct
        #: ones), which makes this two to three times the tokenizer's own speed, and exact.
        self._words: dict[str, int] | None = {} if by_words and _counts_by_word(tokenizer) else None
        self._words_lock = threading.Lock()
        # What the tokenizer reads otherwise: control characters, which its normaliser deletes
        # (joining what they separated), and text it matches before it splits words ([CLS],
        # [MASK]...). A text holding either is counted by the tokenizer.
        added = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.content]
        self._unsafe = re.compile("|".join([_CONTROL, *map(re.escape, added)]), re.IGNORECASE)

    @classmethod
    def for_spec(cls, spec: ModelSpec) -> TokenCounter:
        """The model's counter, one per process (its words' memory shared by every caller)."""
        spec.require_onnx()
        return _shared(spec.tokenizer_path, spec.tokenizer_sha256)

    def count(self, text: str, *, special: bool = False) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=special).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        """Token counts without special tokens."""
        if self._words is None:
            return self._encoded_counts(texts)
        counts = [0] * len(texts)
        by_words: list[tuple[int, list[str]]] = []
        other: list[int] = []
        for i, text in enumerate(texts):
            if text.isascii() and not self._unsafe.search(text):
                by_words.append((i, _ASCII_WORD.findall(text)))
            else:
                other.append(i)
        known = self._word_counts(chain.from_iterable(words for _, words in by_words))
        for i, words in by_words:
            counts[i] = sum(map(known.__getitem__, words))
        for i, count in zip(other, self._encoded_counts([texts[i] for i in other]), strict=True):
            counts[i] = count
        return counts

    def _word_counts(self, words: Iterable[str]) -> dict[str, int]:
        """Every word's count, those not yet known encoded now (in one batch)."""
        assert self._words is not None
        needed = dict.fromkeys(words, 0)
        with self._words_lock:
            memory = self._words
            if len(memory) > _MAX_WORDS:
                memory.clear()
            new = [w for w in needed if w not in memory]
            memory.update(zip(new, self._encoded_counts(new), strict=True))
            # A copy of what is needed: another thread may clear the memory meanwhile.
            for word in needed:
                needed[word] = memory[word]
        return needed

    def _encoded_counts(self, texts: list[str]) -> list[int]:
        """Token counts without special tokens, encoded in parallel by the tokenizer."""
        if not texts:
            return []
        # The fast variant skips the character offsets, which a count does not need.
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def cut(self, text: str, budget: int) -> list[str]:
        """Split `text` into pieces of at most `budget` tokens, cutting between words."""
        budget = max(1, budget)
        by_words = self._cut_by_words(text, budget)
        if by_words is not None:
            return by_words
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        offsets = encoding.offsets
        word_ids = encoding.word_ids
        pieces: list[str] = []
        start_token = 0
        total = len(offsets)
        while start_token < total:
            end_token = min(start_token + budget, total)
            if end_token < total:
                # Back off to a word boundary so no word is re-tokenised differently.
                boundary = end_token
                while boundary > start_token + 1 and word_ids[boundary] == word_ids[boundary - 1]:
                    boundary -= 1
                if boundary > start_token + 1:
                    end_token = boundary
            begin = offsets[start_token][0]
            finish = offsets[end_token - 1][1]
            piece = text[begin:finish].strip()
            if piece:
                pieces.append(piece)
            start_token = end_token
        return pieces

    def _cut_by_words(self, text: str, budget: int) -> list[str] | None:
        """`cut`'s pieces from the words' counts (see `count_many`), or None where only the
        tokenizer can say: a text it reads otherwise, or a word that must be cut inside (one
        over the budget, or one that follows a piece of a single token, which `cut` fills)."""
        if self._words is None or not text.isascii() or self._unsafe.search(text):
            return None
        found = list(_ASCII_WORD.finditer(text))
        known = self._word_counts(m.group() for m in found)
        pieces: list[str] = []
        begin = total = 0
        end = 0
        for match in found:
            count = known[match.group()]
            if count > budget:
                return None
            if total + count > budget:
                if total == 1:
                    return None
                pieces.append(text[begin:end].strip())
                total = 0
            if total == 0:
                begin = match.start()
            total += count
            end = match.end()
        if total:
            pieces.append(text[begin:end].strip())
        return [piece for piece in pieces if piece]


@lru_cache(maxsize=4)
def _shared(path: Path, sha256: str) -> TokenCounter:
    return TokenCounter(_load(path, sha256))


def chunk_budget(max_tokens: int, spec: ModelSpec, counter: TokenCounter) -> int:
    """The chunker's budget: `[chunking] max_tokens`, inside the model's window with the
    document prefix the model sees too (e5's "passage: ")."""
    return min(max_tokens, spec.window - counter.count(spec.document_prefix))
