"""What a vault is written in: the share of its text in each script, and how much of its
Latin-script text is English, measured from a sample of its notes.

`[embedding] model = "auto"` chooses the model with it, and `vaultd doctor` says whether the
model in use fits the vault. A measure, not a language identifier: it needs no model and no
dictionary, counts with one regular expression per script, and reads at most `MAX_CHARS`.

- Prose only: front matter, fenced code and URLs are left out (they are English-looking in
  any vault).
- Text is counted in letters, a character of Chinese, Japanese or Korean as three: one of them
  carries about what a word of five letters does.
- Latin-script text counts as English when at least `ENGLISH_RATE` of its words are common
  English function words (`the`, `and`, `with`, ...): English prose has a fifth to a third of
  its words among them, French, German or Spanish prose a few in a hundred.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: Scripts by code-point ranges (letters of others count as "other").
_SCRIPTS: dict[str, str] = {
    "Latin": "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff",
    "Greek": "\u0370-\u03ff",
    "Cyrillic": "\u0400-\u052f",
    "Hebrew": "\u05d0-\u05ea",
    "Arabic": "\u0620-\u064a\u066e-\u06d3\u0750-\u077f",
    "Devanagari": "\u0900-\u097f",
    "Thai": "\u0e00-\u0e7f",
    "Hangul": "\u1100-\u11ff\uac00-\ud7af",
    "Kana": "\u3040-\u30ff\uff66-\uff9f",
    "Han": "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f",
}
_COUNTERS = {name: re.compile(f"[{chars}]") for name, chars in _SCRIPTS.items()}
_LETTER = re.compile(r"[^\W\d_]")
#: Letters of these scripts weigh this many Latin letters.
_DENSE = {"Han": 3, "Kana": 3, "Hangul": 3}
#: Common in English prose and rare in the prose of the other Latin-script languages (so not
#: "a", "in", "is", "was", "will", "also", "to", "for", "we", "die").
ENGLISH_WORDS = frozenset(
    (  # noqa: SIM905 (a word list reads best as words)
        "the and that with this you are from your by it not can if have but what which when "
        "how there their they were has been would should about into more other only its than "
        "then these those who"
    ).split()
)
#: The share of Latin-script words among ENGLISH_WORDS from which the text is English.
ENGLISH_RATE = 0.06
#: The most characters measured: enough for the shares to settle, little enough for a start.
MAX_CHARS = 2_000_000
_LATIN_WORD = re.compile(f"[{_SCRIPTS['Latin']}]+")
_NOT_PROSE = re.compile(
    r"\A---\n.*?\n---\n|^```.*?^```|^~~~.*?^~~~|https?://\S+", re.DOTALL | re.MULTILINE
)


def prose(text: str) -> str:
    """`text` without front matter, fenced code and URLs."""
    return _NOT_PROSE.sub(" ", text)


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
    """The measure of `texts` (their prose, up to MAX_CHARS in all)."""
    counts = dict.fromkeys(_SCRIPTS, 0)
    counts["other"] = 0
    words = english = left = 0
    budget = MAX_CHARS
    for raw in texts:
        if budget <= 0:
            break
        text = prose(raw)[:budget]
        budget -= len(text)
        letters = len(_LETTER.findall(text))
        for name, counter in _COUNTERS.items():
            found = len(counter.findall(text))
            counts[name] += found * _DENSE.get(name, 1)
            letters -= found
        left += max(0, letters)
        latin_words = _LATIN_WORD.findall(text)
        words += len(latin_words)
        english += sum(1 for w in latin_words if w.lower() in ENGLISH_WORDS)
    counts["other"] = left
    total = sum(counts.values())
    shares = tuple(
        (name, n / total) for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n
    )
    return Languages(total, shares, words > 0 and english / words >= ENGLISH_RATE)


def reads_english(text: str) -> bool:
    """Whether one passage is English: mostly Latin-script prose, enough of it function words.

    A passage with no letters (a table of figures) is not: the multilingual model serves it.
    """
    measured = measure([text])
    return measured.letters > 0 and measured.english >= 0.5


def latin_query(text: str) -> bool:
    """Whether a query is mostly in Latin script (a query is too short to tell English from
    French by its function words: its script decides)."""
    measured = measure([text])
    return dict(measured.shares).get("Latin", 0.0) >= 0.5
