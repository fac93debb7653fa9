"""Source files become blocks by symbol: functions, classes and methods, with their lines.

Rules (also in docs/parsing.md):
- The grammar is chosen by the file's extension (`GRAMMARS`); the grammars are tree-sitter's
  own, installed with vaultd as compiled wheels, so nothing is fetched at run time.
- A symbol whose text fits the budget is one block, named by its path of definitions
  (`class Indexer > def reconcile`). The comments, decorators and attributes written right above
  it belong to it; a docstring is inside it already.
- A symbol too big for the budget is opened: each definition inside it is a block of its own,
  and its remaining lines (the `class` line, the docstring, attributes) are blocks named by the
  symbol itself. A big symbol with nothing inside is cut by the line window.
- The code between symbols (imports, constants, a `main` guard) is blocks with no symbol.
- A file with no grammar, or one its grammar cannot parse without error, is cut by a
  token-budgeted line window: whole lines packed up to about 90% of the budget, no overlap.
- Every block has its 1-based, inclusive line range; blank lines at a block's edges are not
  part of it.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import accumulate, pairwise
from pathlib import PurePosixPath
from typing import Any, Protocol

from vaultd.errors import LeftOutError, NoteError
from vaultd.records import Block, Note

#: The token budget a chunk is cut to when the caller gives none (the chunker's default).
DEFAULT_MAX_TOKENS = 256
#: A block takes at most this share of the budget: the rest is the `title > symbol` line
#: the chunker puts in front of it.
WINDOW_SHARE = 0.9
#: The separator between the definitions of a symbol's path, as in `class A > def b`.
SEPARATOR = " > "


class Counter(Protocol):
    """Token counting in the embedding model's tokenizer (as the chunker's `Counter`)."""

    def count_many(self, texts: list[str]) -> list[int]: ...

    def cut(self, text: str, budget: int) -> list[str]: ...


class RoughCounter:
    """A tokenizer-free estimate for callers without the model: a word or a punctuation mark
    is one token, which is about what a WordPiece vocabulary makes of source code."""

    _TOKEN = re.compile(r"\w+|[^\w\s]")

    def count_many(self, texts: list[str]) -> list[int]:
        return [len(self._TOKEN.findall(t)) for t in texts]

    def cut(self, text: str, budget: int) -> list[str]:
        ends = [m.end() for m in self._TOKEN.finditer(text)]
        cuts = [0, *ends[budget - 1 : -1 : max(1, budget)], len(text)]
        return [text[a:b] for a, b in pairwise(cuts) if text[a:b].strip()]


@dataclass(frozen=True, slots=True)
class Grammar:
    """One language: where its grammar lives and which of its nodes are symbols."""

    name: str
    #: The grammar's package and the function in it that returns the language pointer.
    module: str
    function: str
    #: Node type → the keyword a symbol of that type is named with ("" for none).
    symbols: dict[str, str]
    #: Nodes that only wrap a definition (decorators, `export`, templates): the definition
    #: inside names the symbol, the wrapper's lines are its lines.
    wrappers: frozenset[str] = frozenset()
    #: Nodes written right above a definition that belong to it.
    attached: frozenset[str] = frozenset({"comment"})


_JS_SYMBOLS = {
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "method_definition": "",
}
_TS_SYMBOLS = {
    **_JS_SYMBOLS,
    "abstract_class_declaration": "class",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "internal_module": "namespace",
}
_RUST = Grammar(
    "rust",
    "tree_sitter_rust",
    "language",
    {
        "function_item": "fn",
        "struct_item": "struct",
        "enum_item": "enum",
        "union_item": "union",
        "trait_item": "trait",
        "impl_item": "impl",
        "mod_item": "mod",
        "macro_definition": "macro_rules!",
    },
    attached=frozenset({"line_comment", "block_comment", "attribute_item"}),
)
_C_SYMBOLS = {"function_definition": "", "struct_specifier": "struct", "enum_specifier": "enum"}

#: File extension → grammar. Each grammar is a small wheel of tree-sitter's own organisation.
GRAMMARS: dict[str, Grammar] = {}
for _grammar, _extensions in (
    (
        Grammar(
            "python",
            "tree_sitter_python",
            "language",
            {"function_definition": "def", "class_definition": "class"},
            wrappers=frozenset({"decorated_definition"}),
        ),
        (".py", ".pyi", ".pyw"),
    ),
    (
        Grammar(
            "javascript",
            "tree_sitter_javascript",
            "language",
            _JS_SYMBOLS,
            wrappers=frozenset({"export_statement"}),
        ),
        (".js", ".mjs", ".cjs", ".jsx"),
    ),
    (
        Grammar(
            "typescript",
            "tree_sitter_typescript",
            "language_typescript",
            _TS_SYMBOLS,
            wrappers=frozenset({"export_statement"}),
        ),
        (".ts", ".mts", ".cts"),
    ),
    (
        Grammar(
            "tsx",
            "tree_sitter_typescript",
            "language_tsx",
            _TS_SYMBOLS,
            wrappers=frozenset({"export_statement"}),
        ),
        (".tsx",),
    ),
    (_RUST, (".rs",)),
    (
        Grammar(
            "go",
            "tree_sitter_go",
            "language",
            {"function_declaration": "func", "method_declaration": "func", "type_spec": "type"},
        ),
        (".go",),
    ),
    (
        Grammar(
            "java",
            "tree_sitter_java",
            "language",
            {
                "class_declaration": "class",
                "interface_declaration": "interface",
                "enum_declaration": "enum",
                "record_declaration": "record",
                "method_declaration": "",
                "constructor_declaration": "",
            },
            attached=frozenset({"line_comment", "block_comment"}),
        ),
        (".java",),
    ),
    (Grammar("c", "tree_sitter_c", "language", _C_SYMBOLS), (".c", ".h")),
    (
        Grammar(
            "cpp",
            "tree_sitter_cpp",
            "language",
            {
                **_C_SYMBOLS,
                "class_specifier": "class",
                "namespace_definition": "namespace",
            },
            wrappers=frozenset({"template_declaration"}),
        ),
        (".cpp", ".cc", ".cxx", ".hpp", ".hh", ".hxx"),
    ),
    (
        Grammar("bash", "tree_sitter_bash", "language", {"function_definition": "function"}),
        (".sh", ".bash"),
    ),
):
    for _extension in _extensions:
        GRAMMARS[_extension] = _grammar


def grammar_for(path: str) -> Grammar | None:
    """The grammar for a file by its extension, None when vaultd has none for it."""
    return GRAMMARS.get(PurePosixPath(path).suffix.lower())


@cache
def _language(module: str, function: str) -> Any:
    # Imported on first use: most vaults index no code, and each grammar is a shared library.
    from tree_sitter import Language

    return Language(getattr(importlib.import_module(module), function)())


def _parser(grammar: Grammar) -> Any:
    # A parser per file: one costs microseconds, and a shared one is not safe across threads.
    from tree_sitter import Parser

    return Parser(_language(grammar.module, grammar.function))


@dataclass(frozen=True, slots=True)
class _Span:
    """Rows `first`..`last` (0-based, inclusive) in the definitions `path` (outermost first);
    `text` when it is a piece of one line too long for the budget, else the rows' text."""

    first: int
    last: int
    path: tuple[str, ...]
    text: str | None = None


@dataclass(frozen=True, slots=True)
class _Symbol:
    """A definition: its 0-based first and last rows (with what is attached) and its node."""

    first: int
    last: int
    label: str
    node: Any


def extract(
    path: str,
    data: bytes,
    *,
    counter: Counter | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_bytes: int | None = None,
) -> Note:
    """A source file's blocks by symbol. Raises only `NoteError`: a file the parser crashes
    on is skipped with its reason, never the run. `counter` is the embedding model's token
    counter; without one, a rough count decides what fits (the chunker cuts what does not)."""
    path = unicodedata.normalize("NFC", path)
    if max_bytes is not None and len(data) > max_bytes:
        raise LeftOutError(
            path,
            f"{len(data) / 1048576:.1f} MiB is over the {max_bytes / 1048576:.0f} MiB "
            "limit ([vault] max_file_mb); skipped",
            "too_big",
        )
    try:
        text, errors = _decode(data, path)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        counter = counter or RoughCounter()
        window = _Window(lines, counter, max(8, int(max_tokens * WINDOW_SHARE)))
        grammar = grammar_for(path)
        spans: list[_Span]
        if grammar is None:
            spans = window.cut(0, len(lines) - 1, ())
        else:
            tree = _parser(grammar).parse(text.encode("utf-8"))
            if tree.root_node.has_error:
                errors.append(f"does not parse as {grammar.name}; indexed by lines, not by symbol")
                spans = window.cut(0, len(lines) - 1, ())
            else:
                spans = _Splitter(grammar, window).split(tree.root_node, 0, len(lines) - 1, ())
    except NoteError:
        raise
    except RecursionError as exc:
        raise NoteError(f"{path}: code nested too deeply to parse; skipped") from exc
    except Exception as exc:  # a grammar's crash must cost one file, never the run
        raise NoteError(f"{path}: cannot parse ({type(exc).__name__}: {exc}); skipped") from exc
    info = grammar.name if grammar else ""
    blocks = tuple(
        Block(
            "code",
            span.first + 1,
            span.last + 1,
            span.text if span.text is not None else "\n".join(lines[span.first : span.last + 1]),
            info=info,
            symbol=SEPARATOR.join(span.path) or None,
            # The path is the chunk's section too: the embedded text begins `file > class A >
            # def b`, and blocks of one symbol (a class's lines between its methods) go together.
            headings=span.path,
        )
        for span in spans
    )
    # The body is the file itself: a code block's lines are the editor's.
    return Note(
        path=path,
        title=PurePosixPath(path).stem,
        body=text,
        blocks=blocks,
        errors=tuple(errors),
        kind="code",
    )


def _decode(data: bytes, path: str) -> tuple[str, list[str]]:
    if b"\x00" in data:
        raise LeftOutError(path, "binary content (NUL bytes); not source code, skipped", "binary")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    errors: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        errors.append(f"invalid UTF-8 at byte {exc.start}: replaced with U+FFFD")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, errors


class _Window:
    """The file's lines with their token counts, and the line window over any range of them."""

    def __init__(self, lines: list[str], counter: Counter, budget: int) -> None:
        self.lines = lines
        self.counter = counter
        self.budget = budget
        # One tokenizer call for the whole file; a range's count is a difference of sums, which
        # is exact for a tokenizer that splits at whitespace and close for any other.
        self.counts = counter.count_many(lines) if lines else []
        self._sums = [0, *accumulate(self.counts)]

    def tokens(self, first: int, last: int) -> int:
        return self._sums[last + 1] - self._sums[first]

    def trim(self, first: int, last: int) -> tuple[int, int] | None:
        while first <= last and not self.lines[first].strip():
            first += 1
        while last >= first and not self.lines[last].strip():
            last -= 1
        return (first, last) if first <= last else None

    def fits(self, first: int, last: int) -> bool:
        return self.tokens(first, last) <= self.budget

    def cut(self, first: int, last: int, path: tuple[str, ...]) -> list[_Span]:
        """Whole lines packed up to the budget, in order, with no overlap."""
        spans: list[_Span] = []
        start: int | None = None
        total = 0
        for row in range(first, last + 1):
            tokens = self.counts[row]
            if start is not None and total + tokens > self.budget:
                spans.extend(self._span(start, row - 1, path))
                start, total = None, 0
            if start is None:
                start = row
            total += tokens
        if start is not None:
            spans.extend(self._span(start, last, path))
        return spans

    def _span(self, first: int, last: int, path: tuple[str, ...]) -> list[_Span]:
        trimmed = self.trim(first, last)
        if trimmed is None:
            return []
        first, last = trimmed
        if first == last and self.counts[first] > self.budget:
            # One line longer than the budget (minified code): its pieces, all on that line.
            pieces = self.counter.cut(self.lines[first], self.budget)
            return [_Span(first, first, path, piece) for piece in pieces]
        return [_Span(first, last, path)]


class _Splitter:
    """Opens symbols that do not fit into the symbols inside them."""

    def __init__(self, grammar: Grammar, window: _Window) -> None:
        self.grammar = grammar
        self.window = window

    def split(self, node: Any, first: int, last: int, path: tuple[str, ...]) -> list[_Span]:
        """The spans of rows `first`..`last`, the extent of `node` (the root or a symbol)."""
        inner = self._symbols(node)
        if not inner:
            return self.window.cut(first, last, path)
        spans: list[_Span] = []
        row = first
        for symbol in inner:
            if symbol.first < row or symbol.last > last:
                continue  # on a line another symbol has (one-liners side by side)
            spans.extend(self._gap(row, symbol.first - 1, path))
            inner_path = (*path, symbol.label)
            if self.window.fits(symbol.first, symbol.last):
                trimmed = self.window.trim(symbol.first, symbol.last)
                if trimmed:
                    spans.append(_Span(*trimmed, inner_path))
            else:
                spans.extend(self.split(symbol.node, symbol.first, symbol.last, inner_path))
            row = symbol.last + 1
        spans.extend(self._gap(row, last, path))
        return spans

    def _gap(self, first: int, last: int, path: tuple[str, ...]) -> list[_Span]:
        return self.window.cut(first, last, path) if first <= last else []

    def _symbols(self, node: Any) -> list[_Symbol]:
        """The definitions inside `node` that no other definition inside it holds."""
        found: list[_Symbol] = []
        stack = list(reversed(node.children))
        while stack:
            child = stack.pop()
            definition = self._definition(child)
            if definition is None:
                stack.extend(reversed(child.children))
                continue
            first = self._attached_first(child)
            found.append(_Symbol(first, child.end_point[0], self._label(definition), definition))
        return found

    def _definition(self, node: Any) -> Any | None:
        if node.type in self.grammar.wrappers:
            inner = [c for c in node.named_children if self._definition(c) is not None]
            return self._definition(inner[0]) if inner else None
        if node.type in self.grammar.symbols:
            return node
        if node.type in ("lexical_declaration", "variable_declaration"):
            return self._function_value(node)
        return None

    def _function_value(self, node: Any) -> Any | None:
        # `const render = () => ...`: a function in all but the keyword.
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(declarators) != 1:
            return None
        value = declarators[0].child_by_field_name("value")
        if value is not None and value.type in ("arrow_function", "function_expression"):
            return node
        return None

    def _attached_first(self, node: Any) -> int:
        first = int(node.start_point[0])
        previous = node.prev_sibling
        while previous is not None and previous.type in self.grammar.attached:
            if previous.end_point[0] < first - 1:
                break  # a blank line between: a comment about what is above, not this
            first = int(previous.start_point[0])
            previous = previous.prev_sibling
        return first

    def _label(self, node: Any) -> str:
        keyword = self.grammar.symbols.get(node.type, "function")
        name = _name(node)
        if node.type == "impl_item":
            trait = node.child_by_field_name("trait")
            kind = node.child_by_field_name("type")
            name = " for ".join(_text(n) for n in (trait, kind) if n is not None)
        elif node.type == "method_declaration" and self.grammar.name == "go":
            receiver = node.child_by_field_name("receiver")
            name = f"{_text(receiver)} {name}" if receiver is not None else name
        return f"{keyword} {name}".strip()


def _name(node: Any) -> str:
    for field in ("name", "declarator"):
        child = node.child_by_field_name(field)
        while child is not None and field == "declarator":
            inner = child.child_by_field_name("declarator")
            if inner is None:
                break
            child = inner
        if child is not None:
            return _text(child)
    declarators = [c for c in node.named_children if c.type == "variable_declarator"]
    if declarators:
        return _name(declarators[0])
    return ""


def _text(node: Any) -> str:
    return " ".join(bytes(node.text).decode("utf-8", errors="replace").split())


def extensions() -> Sequence[str]:
    """Every extension vaultd parses by symbol (for `vaultd inspect` and the docs)."""
    return sorted(GRAMMARS)
