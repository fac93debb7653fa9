"""pipeline/code: source files as blocks by symbol, with their lines, by the real tree-sitter
grammars; a line window where there is no grammar or the parse fails."""

from __future__ import annotations

import gzip

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
    return [(b.start_line, b.end_line, b.location.symbol) for b in note.blocks]


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
    assert symbol in [b.location.symbol for b in code.extract(path, source).blocks]


def test_without_a_grammar_or_a_parse_lines_are_packed_up_to_the_budget() -> None:
    source = "".join(f"word{i} word word word\n" for i in range(30)).encode()
    note = code.extract("notes.txt", source, max_tokens=20)
    # 4 tokens a line, a window of 18 tokens: 4 lines a block, every line once, in order.
    assert spans(note)[:2] == [(1, 4, None), (5, 8, None)]
    assert [line for b in note.blocks for line in b.text.split("\n")] == source.decode().split(
        "\n"
    )[:-1]
    broken = code.extract("bad.py", b"def f(:\n    pass\n)))\n[[[\n")
    assert broken.errors == (
        "does not parse as python (error at line 1, 28% of the file in error); indexed by "
        "lines, not by symbol",
    )
    assert spans(broken) == [(1, 4, None)]


def test_a_stray_error_inside_one_definition_costs_nothing_else() -> None:
    source = b"def f(:\n    pass\n\n\ndef g():\n    return 2\n\n\nclass C:\n    x = 1\n"
    note = code.extract("bad.py", source)
    # The error is 2 bytes of 57, under MAX_ERROR_SHARE: every definition keeps its block.
    assert note.errors == ()
    assert spans(note) == [(1, 2, "def f"), (5, 6, "def g"), (9, 10, "class C")]


def test_definitions_sharing_a_line_too_long_for_a_chunk_are_read_by_lines() -> None:
    line = " ".join(f"function f{i}(a) {{ return a + {i}; }}" for i in range(100))
    note = code.extract("app.min.js", line.encode() + b"\n", max_tokens=50)
    assert note.errors == (
        f"definitions share line 1, too long for one chunk ({len(line)} characters: "
        "minified?); indexed by lines, not by symbol",
    )
    assert {b.location.symbol for b in note.blocks} == {None} and len(note.blocks) > 10
    # Side by side on a short line, the second is in the first's block, as before.
    short = code.extract("a.js", b"function a() {} function b() {}\n")
    assert (short.errors, spans(short)) == ((), [(1, 1, "function a")])


def test_a_line_longer_than_the_budget_is_cut_into_pieces_on_that_line() -> None:
    note = code.extract("min.js", b"var a = " + b"1 + " * 200 + b"1;\n", max_tokens=50)
    assert len(note.blocks) > 1
    assert {(b.start_line, b.end_line) for b in note.blocks} == {(1, 1)}


def test_text_is_decoded_leniently_and_binary_or_big_files_are_left_out() -> None:
    note = code.extract("a.py", b"\xef\xbb\xbfx = '\xff'\r\ny = 2\r\n")
    assert note.body == "x = '\ufffd'\ny = 2\n"
    assert note.errors == ("invalid UTF-8 at byte 5: replaced with U+FFFD",)
    # Compressed bytes hold NULs at about 1 in 256, and are more than half no text.
    with pytest.raises(LeftOutError) as binary:
        code.extract("a.py", gzip.compress(PYTHON))
    assert binary.value.kind == "binary"
    assert "of it is no text" in binary.value.reason
    # UTF-16 text is half NULs: not read as source either.
    with pytest.raises(LeftOutError):
        code.extract("a.py", PYTHON.decode().encode("utf-16"))
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


def test_a_source_file_with_a_few_stray_nul_bytes_is_still_source() -> None:
    note = code.extract("a.py", b"def f():\n    return '1\x00'\n\n\ndef g():\n    pass\n")
    assert note.errors == ("1 NUL byte replaced with U+FFFD",)
    assert [b.location.symbol for b in note.blocks] == ["def f", "def g"]
    assert "'1\ufffd'" in note.body


@pytest.mark.parametrize(
    ("path", "text", "grammar"),
    [
        ("bin/tool", "#!/usr/bin/env bash\necho hi\n", "bash"),
        ("bin/tool", "#!/bin/sh\n", "bash"),
        ("bin/tool", "#! /usr/bin/python3.12 -u\n", "python"),
        ("bin/tool", "#!/usr/bin/env -S node --no-warnings\n", "javascript"),
        ("bin/tool", "#!/usr/bin/env FOO=1 ruby\n", "ruby"),
        ("bin/tool", "#!/usr/bin/env perl\n", None),
        ("bin/tool", "echo no shebang\n", None),
        ("notes.txt", "#!/bin/sh\n", None),  # an extension says what a file is
        ("Gemfile", "", "ruby"),
        ("lib/a.gemspec", "", "ruby"),
        ("a.kts", "", "kotlin"),
        ("t.XSL", "", "xml"),
        ("a.scm", "", None),
    ],
)
def test_the_grammar_is_chosen_by_extension_name_or_shebang(
    path: str, text: str, grammar: str | None
) -> None:
    found = code.grammar_for(path, text)
    assert (found.name if found else None) == grammar


@pytest.mark.parametrize(
    ("path", "source", "expected"),
    [
        (
            "a.cs",
            "namespace Shop.Orders\n{\n    public class Order\n    {\n"
            "        public int Id { get; set; }\n        public Order() { }\n"
            "        public void Ship() { }\n    }\n}\n",
            [
                (1, 2, "namespace Shop.Orders"),
                (3, 4, "namespace Shop.Orders > class Order"),
                (5, 5, "namespace Shop.Orders > class Order > Id"),
                (6, 6, "namespace Shop.Orders > class Order > Order"),
                (7, 7, "namespace Shop.Orders > class Order > Ship"),
                (8, 8, "namespace Shop.Orders > class Order"),
                (9, 9, "namespace Shop.Orders"),
            ],
        ),
        (
            "b.cs",
            "namespace Shop;\n\npublic record Line(int Qty);\n\n"
            "public interface IRepo\n{\n    void Save();\n}\n",
            [
                (1, 1, "namespace Shop"),
                (3, 3, "namespace Shop > record Line"),
                (5, 8, "namespace Shop > interface IRepo"),
            ],
        ),
        (
            "a.kt",
            "package shop\n\nclass Order {\n  fun ship() {}\n  companion object {\n"
            "    fun create() = Order()\n  }\n}\n\nobject Registry\n\n"
            "interface Repo {\n  fun save()\n}\n",
            [
                (1, 1, None),
                (3, 3, "class Order"),
                (4, 4, "class Order > fun ship"),
                (5, 7, "class Order > companion object"),
                (8, 8, "class Order"),
                (10, 10, "object Registry"),
                (12, 14, "interface Repo"),
            ],
        ),
        (
            "a.swift",
            'struct Widget {\n  let name = "a widget"\n'
            "  func render() -> String { name + name }\n}\n\n"
            "extension Widget: View {\n  init() {}\n}\n\nprotocol View {\n  func render()\n}\n\n"
            "enum Kind { case a }\n",
            [
                (1, 2, "struct Widget"),
                (3, 3, "struct Widget > func render"),
                (4, 4, "struct Widget"),
                (6, 8, "extension Widget"),
                (10, 12, "protocol View"),
                (14, 14, "enum Kind"),
            ],
        ),
        (
            "a.rb",
            "module Shop\n  class Order < Base\n    # Sends it.\n    def ship\n    end\n\n"
            "    def self.create\n    end\n\n    class << self\n    end\n  end\nend\n",
            [
                (1, 1, "module Shop"),
                (2, 2, "module Shop > class Order"),
                (3, 5, "module Shop > class Order > def ship"),
                (7, 8, "module Shop > class Order > def self.create"),
                (10, 11, "module Shop > class Order > class << self"),
                (12, 12, "module Shop > class Order"),
                (13, 13, "module Shop"),
            ],
        ),
    ],
)
def test_symbols_of_the_languages_added_by_their_definitions(
    path: str, source: str, expected: list[tuple[int, int, str | None]]
) -> None:
    # A budget so small that most definitions are opened: the paths inside them show.
    note = code.extract(path, source.encode(), max_tokens=20)
    assert note.errors == ()
    assert spans(note) == expected


HASKELL = b"""module Data.Map (insertWith) where

import Data.List

-- | Insert with a function.
insertWith :: (a -> a -> a) -> k -> a -> Map k a -> Map k a
insertWith f k x Tip = x
insertWith f k x m = go m

-- | A map.
data Map k a = Tip | Bin k a

instance Functor (Map k) where
  fmap = undefined

(a, b) = (1, 2)
"""


def test_haskell_the_module_holds_every_path_and_equations_are_one_symbol() -> None:
    note = code.extract("Map.hs", HASKELL, max_tokens=1000)
    assert note.errors == ()
    assert spans(note) == [
        (1, 3, "module Data.Map"),
        # The comment and the type signature above it, and both equations.
        (5, 8, "module Data.Map > insertWith"),
        (10, 11, "module Data.Map > data Map"),
        (13, 14, "module Data.Map > instance Functor (Map k)"),
        (16, 16, "module Data.Map"),  # a pattern binding names nothing
    ]


SOLIDITY = b"""pragma solidity ^0.8.0;

contract ERC20 {
    uint256 total;

    /// Moves tokens.
    function transfer(address to, uint256 v) public returns (bool) {
        return true;
    }

    receive() external payable {}
    constructor() {}
}
"""

COMPACT = b"""pragma language_version >= 0.16;

import CompactStandardLibrary;

export ledger counter: Counter;

witness secretKey(): Bytes<32>;

export circuit mint(amount: Uint<64>): [] {
  counter.increment(amount);
}

contract Token {
  circuit transfer(to: Bytes<32>): [];
}

module Ownable {
  export circuit owner(): Bytes<32> {
    return secretKey();
  }
}
"""


def test_contracts_by_contract_function_circuit_ledger_and_witness() -> None:
    sol = code.extract("ERC20.sol", SOLIDITY, max_tokens=30)
    assert (sol.errors, spans(sol)) == (
        (),
        [
            (1, 1, None),
            (3, 4, "contract ERC20"),
            (6, 9, "contract ERC20 > function transfer"),
            (11, 11, "contract ERC20 > receive"),
            (12, 12, "contract ERC20 > constructor"),
            (13, 13, "contract ERC20"),
        ],
    )
    compact = code.extract("token.compact", COMPACT, max_tokens=1000)
    assert (compact.errors, spans(compact)) == (
        (),
        [
            (1, 3, None),
            (5, 5, "ledger counter"),
            (7, 7, "witness secretKey"),
            (9, 11, "circuit mint"),
            (13, 15, "contract Token"),
            (17, 21, "module Ownable"),
        ],
    )
    opened = code.extract("token.compact", COMPACT, max_tokens=16)
    assert "contract Token > circuit transfer" in [b.location.symbol for b in opened.blocks]
    assert "module Ownable > circuit owner" in [b.location.symbol for b in opened.blocks]


def test_markup_by_tables_keys_headings_and_elements() -> None:
    toml = code.extract(
        "pyproject.toml",
        b"# The package.\n[project]\nname = 'x'\n\n# Lint rules.\n[tool.ruff]\n"
        b"line-length = 100\n\n[[bin]]\nname = 'a'\n",
    )
    # The comment above a table is the table's, though the grammar ends the one before there.
    assert spans(toml) == [(1, 3, "[project]"), (5, 7, "[tool.ruff]"), (9, 10, "[[bin]]")]
    steps = "".join(f"      - run: echo step {i} with some words\n" for i in range(30))
    yaml = code.extract(
        "ci.yml",
        f"name: CI\non:\n  push:\njobs:\n  build:\n    steps:\n{steps}  test:\n    x: 1\n".encode(),
        max_tokens=120,
    )
    # `jobs` is too big: its keys are blocks of their own; theirs are not opened.
    assert [s for s in spans(yaml) if s[2] != "jobs > build"] == [
        (1, 1, "name"),
        (2, 3, "on"),
        (4, 4, "jobs"),
        (37, 38, "jobs > test"),
    ]
    html = code.extract(
        "page.html",
        b"<!doctype html>\n<html>\n<body>\n<h1>Guide</h1>\n<p>Intro.</p>\n<h2>Install</h2>\n"
        b"<p>Run it.</p>\n<h2>Use <em>it</em></h2>\n<p>Go.</p>\n<h1>Appendix</h1>\n</body>\n"
        b"</html>\n",
    )
    assert spans(html) == [
        (1, 3, None),
        (4, 5, "Guide"),
        (6, 7, "Guide > Install"),
        (8, 9, "Guide > Use it"),
        (10, 12, "Appendix"),
    ]
    xsl = code.extract(
        "t.xsl",
        b'<?xml version="1.0"?>\n<xsl:stylesheet version="3.0">\n  <!-- Paragraphs. -->\n'
        b'  <xsl:template match="para" mode="m:html">\n    <p/>\n  </xsl:template>\n\n'
        b'  <xsl:template name="t:title">\n    <h1/>\n  </xsl:template>\n</xsl:stylesheet>\n',
    )
    assert spans(xsl) == [
        (1, 2, None),
        (3, 6, 'xsl:template match="para" mode="m:html"'),
        (8, 10, 'xsl:template name="t:title"'),
        (11, 11, None),
    ]
