"""What a vault is written in: the share of its text in each script, and how much of its
Latin-script text is English, measured from a sample of its notes.

`[embedding] model = "auto"` chooses the model with it, and `vaultd doctor` says whether the
model in use fits the vault. A measure, not a language identifier: it needs no model and no
dictionary, and reads a few hundred notes in a fraction of a second.

- Text is counted in letters, a character of Chinese, Japanese or Korean as three: one of them
  carries about what a word of five letters does.
- Latin-script text counts as English when at least `ENGLISH_RATE` of its words are common
  English function words (`the`, `of`, `and`, `is`, ...): English prose has a quarter to a
  third of its words among them, French, German or Spanish almost none.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

#: Scripts by code-point range; a letter outside all of them counts as "other".
_RANGES: tuple[tuple[str, int, int], ...] = (
    ("Latin", 0x0041, 0x024F),
    ("Latin", 0x1E00, 0x1EFF),
    ("Greek", 0x0370, 0x03FF),
    ("Cyrillic", 0x0400, 0x052F),
    ("Hebrew", 0x0590, 0x05FF),
    ("Arabic", 0x0600, 0x06FF),
    ("Arabic", 0x0750, 0x077F),
    ("Devanagari", 0x0900, 0x097F),
    ("Thai", 0x0E00, 0x0E7F),
    ("Hangul", 0x1100, 0x11FF),
    ("Kana", 0x3040, 0x30FF),
    ("Han", 0x3400, 0x4DBF),
    ("Han", 0x4E00, 0x9FFF),
    ("Hangul", 0xAC00, 0xD7AF),
    ("Han", 0xF900, 0xFAFF),
    ("Kana", 0xFF66, 0xFF9F),
    ("Han", 0x20000, 0x3134F),
)
#: Letters of these scripts weigh this many Latin letters.
_DENSE = {"Han": 3, "Kana": 3, "Hangul": 3}
#: Common English function words, none of them also a common word of another Latin-script
#: language (no "a", "in", "on", "die", "son").
ENGLISH_WORDS = frozenset(
    (  # noqa: SIM905 (a word list reads best as words)
        "the of and to is that for with this you are from your be or by it not can if have "
        "will but what which when how there their they we was were has been would should "
        "about into more other only also its than then these those who"
    ).split()
)
#: The share of Latin-script words among ENGLISH_WORDS above which the text is English.
ENGLISH_RATE = 0.08
_LATIN_WORD = re.compile(r"[A-Za-z\u00C0-\u024F]+")


def _script(char: str) -> str:
    point = ord(char)
    for name, low, high in _RANGES:
        if low <= point <= high:
            return name
    return "other"


@dataclass(frozen=True, slots=True)
class Languages:
    """The measure of a sample of notes."""

    #: Weighted letters measured, and each script's share of them (largest first).
    letters: int
    shares: tuple[tuple[str, float], ...]
    #: Whether the Latin-script text reads as English (see ENGLISH_RATE).
    latin_is_english: bool

    @property
    def english(self) -> float:
        """The share of the text that is English."""
        latin = dict(self.shares).get("Latin", 0.0)
        return latin if self.latin_is_english else 0.0

    def mostly_english(self) -> bool:
        return self.letters == 0 or self.english >= 0.5

    def describe(self) -> str:
        """`62% Han, 35% Latin (English)`: the scripts of 1% or more."""
        if not self.letters:
            return "no text measured"
        parts = []
        for name, share in self.shares:
            if share >= 0.01:
                label = name
                if name == "Latin":
                    label += " (English)" if self.latin_is_english else " (not English)"
                parts.append(f"{share:.0%} {label}")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "letters": self.letters,
            "shares": {name: round(share, 4) for name, share in self.shares},
            "english": round(self.english, 4),
            "summary": self.describe(),
        }


def measure(texts: Iterable[str]) -> Languages:
    counts: Counter[str] = Counter()
    words = english = 0
    for text in texts:
        for char in text:
            if char.isalpha():
                name = _script(char)
                counts[name] += _DENSE.get(name, 1)
        for word in _LATIN_WORD.findall(text):
            words += 1
            english += word.lower() in ENGLISH_WORDS
    total = sum(counts.values())
    shares = tuple(
        (name, n / total) for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return Languages(total, shares, words > 0 and english / words >= ENGLISH_RATE)
