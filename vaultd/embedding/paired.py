"""Two models as one: a multilingual model for every passage, an English one beside it for the
passages and queries in English.

multilingual-e5-small reads every language, but English less well than all-MiniLM-L6-v2 (over
obsidian-help/en, hybrid hit@5 0.87 against 0.96, docs/benchmarks.md), and mixing the two
models' similarities into one ranking only loses to the English model alone there. So each
passage's stored vector is the two models' vectors end to end, `[multilingual ; english]`, the
English half zero for a passage that does not read as English; the store compares by dot
product (`space = "ip"`), so a query vector with one half zero scores by that model alone:

- a query in Latin script searches twice: the English half over the passages in English, the
  multilingual half over the others (the searcher interleaves the two rankings by rank);
- any other query searches every passage by the multilingual half: a question in Chinese still
  finds an English note.

Over a vault all in English this ranks exactly as the English model does; over one in Chinese,
exactly as the multilingual model does. The English model costs its time only on the passages
in English. What reads as English, and what a Latin-script query is, are decided by functions
the composition root passes in (`vaultd.pipeline.languages`): the same text always gets the
same answer, and a stored vector says which it got (`passage_metadata`), so the store's
`english` metadata always matches the vector beside it, even for a vector cached before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vaultd.embedding.embedder import Embedder, Route, Space, Vectors

#: Texts embedded by both models before their vectors are handed on: small enough that a
#: batch's first records reach the store soon, large enough for length-sorting to pay.
GROUP = 256


def paired_id(multilingual_id: str, english_id: str) -> str:
    """The id of a pair's vectors (what its collection is named for)."""
    return f"{multilingual_id}+{english_id}"


class PairedEmbedder:
    """`multilingual` for every text, `english` beside it for the texts in English."""

    def __init__(
        self,
        multilingual: Embedder,
        english: Embedder,
        *,
        reads_english: Callable[[str], bool],
        latin_query: Callable[[str], bool],
    ) -> None:
        self.multilingual = multilingual
        self.english = english
        self._reads_english = reads_english
        self._latin_query = latin_query
        self._split = multilingual.dimensions
        self.embedded = 0

    @property
    def model_id(self) -> str:
        return paired_id(self.multilingual.model_id, self.english.model_id)

    @property
    def dimensions(self) -> int:
        return self.multilingual.dimensions + self.english.dimensions

    @property
    def space(self) -> Space:
        return "ip"

    @property
    def batch_size(self) -> int:
        return self.multilingual.batch_size

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self.multilingual.batch_size = self.english.batch_size = value

    @property
    def loaded(self) -> bool:
        return self.multilingual.loaded or self.english.loaded

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        pause: Callable[[], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
        ready: Callable[[list[int], Vectors], None] | None = None,
    ) -> Vectors:
        """As `Embedder.embed_documents`; progress is counted in texts, both models' work on a
        group of them done."""
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for start in range(0, len(texts), GROUP):
            if start and pause is not None:
                pause()
            group = list(texts[start : start + GROUP])
            rows = np.zeros((len(group), self.dimensions), dtype=np.float32)
            rows[:, : self._split] = self.multilingual.embed_documents(group, pause=pause)
            english = [i for i, text in enumerate(group) if self._reads_english(text)]
            if english:
                if pause is not None:
                    pause()
                vectors = self.english.embed_documents([group[i] for i in english], pause=pause)
                rows[english, self._split :] = vectors
            at = list(range(start, start + len(group)))
            out[at] = rows
            self.embedded += len(group)
            if ready is not None:
                ready(at, rows)
            if progress is not None:
                progress(start + len(group), len(texts))
        return out

    def embed_query(self, text: str) -> Vectors:
        """The multilingual half alone: the query for every passage."""
        vector = np.zeros(self.dimensions, dtype=np.float32)
        vector[: self._split] = self.multilingual.embed_query(text)
        return vector

    def query_routes(self, text: str) -> list[Route]:
        """A Latin-script query: the English model over the passages in English, then the
        multilingual one over the rest; any other, the multilingual model over all."""
        multilingual = self.embed_query(text)
        if not self._latin_query(text):
            return [Route(multilingual)]
        english = np.zeros(self.dimensions, dtype=np.float32)
        english[self._split :] = self.english.embed_query(text)
        return [Route(english, english=True), Route(multilingual, english=False)]

    def passage_metadata(self, vector: Vectors) -> dict[str, Any]:
        """Whether the passage was read as English: its English half is not zero."""
        return {"english": bool(np.any(vector[self._split :]))}

    def unload(self, unused_for: float) -> bool:
        # Both, not either: `or` would leave the second loaded when the first unloads.
        unloaded = self.multilingual.unload(unused_for)
        return self.english.unload(unused_for) or unloaded

    def release_memory(self) -> None:
        self.multilingual.release_memory()
        self.english.release_memory()
