"""Counting and cutting text in the embedding model's own tokens.

The chunker budgets in these tokens so that what is embedded is never silently truncated by
the model; the embedder encodes with the same tokenizer.
"""

from __future__ import annotations

from functools import lru_cache
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


class TokenCounter:
    """Counts tokens as the model will see them."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        # [CLS] and [SEP] for BERT-style models; whatever the post-processor adds otherwise.
        self.special_tokens = len(tokenizer.encode("", add_special_tokens=True).ids)
        #: Whether texts joined by whitespace count as the sum of their counts. True when the
        #: pre-tokenizer splits at whitespace and normalises character by character (BERT's
        #: WordPiece): no token spans a join, so the chunker can add counts instead of
        #: encoding every embedded text again. Byte-level BPE, whose tokens carry the space
        #: before them, is not additive.
        self.additive = _splits_at_whitespace(tokenizer)

    @classmethod
    def for_spec(cls, spec: ModelSpec) -> TokenCounter:
        return cls(load_tokenizer(spec))

    def count(self, text: str, *, special: bool = False) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=special).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        """Token counts without special tokens, encoded in parallel."""
        if not texts:
            return []
        # The fast variant skips the character offsets, which a count does not need.
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def cut(self, text: str, budget: int) -> list[str]:
        """Split `text` into pieces of at most `budget` tokens, cutting between words."""
        budget = max(1, budget)
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


def chunk_budget(max_tokens: int, spec: ModelSpec, counter: TokenCounter) -> int:
    """The chunker's budget: `[chunking] max_tokens`, inside the model's window with the
    document prefix the model sees too (e5's "passage: ")."""
    return min(max_tokens, spec.window - counter.count(spec.document_prefix))
