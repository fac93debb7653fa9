"""The common words of the query's language: words never taken for typos.

A word a dictionary knows is a word someone meant, even when no note holds it: "taro",
"crib" and "does" were corrected to "tart", "cri" and "died" on a medical vault that held
none of them, each a loss. The list is pyspellchecker's English dictionary (160,572 words
seen at least 50 times in its subtitles source, filtered against a spelling dictionary, so
that misspellings are rare in it; MIT, no dependencies, shipped in its 7 MB wheel and read
offline). Of the 170 rule-made typos of the known-item sets, two are English words in it
("cunt", "bout"): those are not corrected, the price of never correcting a real word.

Read once per process on first use (about a second on a loaded machine; a set of about
160,000 strings).
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_words: frozenset[str] | None = None


def words() -> frozenset[str]:
    """The common words, lower case."""
    global _words
    with _lock:
        if _words is None:
            from spellchecker import SpellChecker  # imported here: most searches never ask

            dictionary = SpellChecker(language="en", distance=1).word_frequency.dictionary
            _words = frozenset(w.lower() for w in dictionary)
        return _words


def is_common(word: str) -> bool:
    """Whether `word` (any case) is a common word of the language."""
    return word.lower() in words()
