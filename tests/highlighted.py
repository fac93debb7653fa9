"""A note whose own bold markup no highlight may touch, the queries run on it, and the check
every way in shares (tests/test_highlights.py, tests/test_ui_browser.py)."""

from __future__ import annotations

import re
from typing import Any

#: Bold words the queries below never match, an astral character before the matches (one code
#: point, two UTF-16 units) and a matched word inside bold markup.
NOTE = (
    "# Layouts\n\n"
    "**Ribbon:** 🦦 1. In the ribbon, click **Manage saffron layouts** to save one.\n\n"
    "**Command palette:** the gnuplot terminal calls setCharSpace for the spacing.\n"
)
PATH = "Layouts.md"
#: Each query, and the words it must highlight in the note and nothing else.
QUERIES = {"setCharSpace": {"setCharSpace"}, "saffron": {"saffron"}}
BOLD = re.compile(r"\*\*(.+?)\*\*")


def check_hit(hit: dict[str, Any], words: set[str]) -> None:
    """The hit's text (or snippet) is the note's, and its ranges cover exactly the words: none
    a bold word of the note's, and a word inside bold markup without the markup."""
    shown = hit["snippet"] if "snippet" in hit else hit["text"]
    assert shown.strip("…") in NOTE, shown  # the note's text, nothing inserted
    ranges = hit["highlights"]
    assert ranges, hit
    assert ranges == sorted(ranges)
    assert {shown[s:e] for s, e in ranges} == words, (shown, ranges)
    for s, e in ranges:
        for bold in BOLD.finditer(shown):
            bs, be = bold.span()
            inside = bs + 2 <= s and e <= be - 2
            assert e <= bs or s >= be or inside, (shown[s:e], bold.group())
