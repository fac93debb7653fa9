"""pipeline/code: source files as blocks by symbol, with their lines, by the real tree-sitter
grammars; a line window where there is no grammar or the parse fails."""

from __future__ import annotations

import pytest

from vaultd.errors import LeftOutError
from vaultd.pipeline import code
from vaultd.records import Note

PYTHON = b'''"""A module."""

import os

# Why this helper exists.
@staticmethod
def helper(x):
    return x + 1


class Big:
    """A class too big for the budget."""

    LIMIT = 3

    def first(self):
        return [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]

    def second(self):
        return [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]


if __name__ == "__main__":
    helper(os.sep)
'''


def spans(note: Note) -> list[tuple[int, int, str | None]]:
    return [(b.start_line, b.end_line, b.symbol) for b in note.blocks]


def test_symbols_are_blocks_and_a_big_one_is_opened() -> None:
    note = code.extract("pkg/mod.py", PYTHON, max_tokens=60)
    assert (note.title, note.kind, note.errors) == ("mod", "code", ())
    assert note.body == PYTHON.decode()
    assert spans(note) == [
        (1, 3, None),  # the docstring and imports between symbols
        (5, 8, "def helper"),  # the comment and decorator above are the function's
        (11, 14, "class Big"),  # the class line, its docstring and attributes
        (16, 17, "class Big > def first"),
        (19, 20, "class Big > def second"),
        (23, 24, None),
    ]
    assert all(b.info == "python" for b in note.blocks)
    assert note.blocks[3].headings == ("class Big", "def first")
    assert note.blocks[1].text.startswith("# Why this helper exists.\n@staticmethod")


def test_a_symbol_that_fits_is_one_block() -> None:
    note = code.extract("mod.py", PYTHON, max_tokens=1000)
    assert (11, 20, "class Big") in spans(note)


@pytest.mark.parametrize(
    ("path", "source", "symbol"),
    [
        ("a.rs", b"struct S;\nimpl Display for S {\n    fn fmt() {}\n}\n", "impl Display for S"),
        ("a.go", b"package p\n\nfunc (s *S) Run() {}\n", "func (s *S) Run"),
        ("a.ts", b"export const render = () => {\n  return 1;\n};\n", "function render"),
        ("a.c", b"int main(void) {\n  return 0;\n}\n", "main"),
    ],
)
def test_symbols_are_named_as_their_language_writes_them(
    path: str, source: bytes, symbol: str
) -> None:
    assert symbol in [b.symbol for b in code.extract(path, source).blocks]


def test_without_a_grammar_or_a_parse_lines_are_packed_up_to_the_budget() -> None:
    source = "".join(f"word{i} word word word\n" for i in range(30)).encode()
    note = code.extract("notes.txt", source, max_tokens=20)
    # 4 tokens a line, a window of 18 tokens: 4 lines a block, every line once, in order.
    assert spans(note)[:2] == [(1, 4, None), (5, 8, None)]
    assert [line for b in note.blocks for line in b.text.split("\n")] == source.decode().split(
        "\n"
    )[:-1]
    broken = code.extract("bad.py", b"def f(:\n    pass\n")
    assert broken.errors == ("does not parse as python; indexed by lines, not by symbol",)
    assert spans(broken) == [(1, 2, None)]


def test_a_line_longer_than_the_budget_is_cut_into_pieces_on_that_line() -> None:
    note = code.extract("min.js", b"var a = " + b"1 + " * 200 + b"1;\n", max_tokens=50)
    assert len(note.blocks) > 1
    assert {(b.start_line, b.end_line) for b in note.blocks} == {(1, 1)}


def test_text_is_decoded_leniently_and_binary_or_big_files_are_left_out() -> None:
    note = code.extract("a.py", b"\xef\xbb\xbfx = '\xff'\r\ny = 2\r\n")
    assert note.body == "x = '\ufffd'\ny = 2\n"
    assert note.errors == ("invalid UTF-8 at byte 5: replaced with U+FFFD",)
    with pytest.raises(LeftOutError) as binary:
        code.extract("a.py", b"x = 1\x00\n")
    assert binary.value.kind == "binary"
    with pytest.raises(LeftOutError) as big:
        code.extract("a.py", b"x = 1\n" * 10, max_bytes=10)
    assert big.value.kind == "too_big"


def test_the_extensions_parsed_by_symbol() -> None:
    assert {".py", ".rs", ".go", ".ts", ".tsx", ".c", ".sh"} <= set(code.extensions())
    assert code.grammar_for("A.PY") is code.grammar_for("a.py") is not None
    assert code.grammar_for("a.txt") is None


def test_a_comment_after_a_blank_line_is_not_the_next_symbols() -> None:
    note = code.extract("a.py", b"# About the module.\n\n# About f.\ndef f():\n    pass\n")
    assert spans(note) == [(1, 1, None), (3, 5, "def f")]
