"""The common words never taken for typos: the shipped list, read offline, any case."""

from __future__ import annotations

import pytest

from vaultd.storage.common_words import is_common, words


@pytest.mark.parametrize("word", ["taro", "crib", "does", "leeks", "accident", "Hearing"])
def test_words_a_query_meant_are_common(word: str) -> None:
    # Each was "corrected" on a vault that did not hold it (issue 53).
    assert is_common(word)


@pytest.mark.parametrize("word", ["cholestrol", "tabels", "setcharspace", "qzxv"])
def test_typos_and_made_up_words_are_not(word: str) -> None:
    assert not is_common(word)


def test_the_list_is_read_once_and_lower_case() -> None:
    first = words()
    assert words() is first
    assert len(first) > 100_000
    assert all(w == w.lower() for w in list(first)[:1000])
