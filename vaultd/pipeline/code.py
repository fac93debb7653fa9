"""Source files become blocks by symbol: functions, classes and methods, with their lines.

Rules (also in docs/parsing.md):
- The grammar is chosen by the file's extension (`GRAMMARS`), else by its name (`Gemfile`),
  else, for a file with no extension, by the interpreter its `#!` line names; the grammars are
  tree-sitter's own, installed with vaultd as compiled wheels, so nothing is fetched at run
  time.
- A symbol whose text fits the budget is one block, named by its path of definitions
  (`class Indexer > def reconcile`). The comments, decorators and attributes written right above
  it belong to it; a docstring is inside it already.
- A symbol too big for the budget is opened: each definition inside it is a block of its own,
  and its remaining lines (the `class` line, the docstring, attributes) are blocks named by the
  symbol itself. A big symbol with nothing inside is cut by the line window.
- The code between symbols (imports, constants, a `main` guard) is blocks with no symbol, or
  named by the file's scope where the language has one (a Haskell module).
- Markup is read by its own structure: a TOML file by tables, a YAML file by its top-level
  keys (a big one by its keys), an XML file by the elements under its root, an HTML page by
  sections from one heading to the next.
- A file with no grammar is cut by a token-budgeted line window: whole lines packed up to about
  90% of the budget, no overlap. So is a file whose syntax errors cover more than
  `MAX_ERROR_SHARE` of it, or whose definitions share lines too long for one chunk (minified
  code); the file is then indexed in part, its reason in `Note.errors`.
- Every block has its 1-based, inclusive line range; blank lines at a block's edges are not
  part of it.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import accumulate, pairwise
from pathlib import PurePosixPath
from typing import Any, Protocol

from vaultd.errors import LeftOutError, NoteError
from vaultd.records import Block, Location, Note

#: The token budget a chunk is cut to when the caller gives none (the chunker's default).
DEFAULT_MAX_TOKENS = 256
#: A block takes at most this share of the budget: the rest is the `title > symbol` line
#: the chunker puts in front of it.
WINDOW_SHARE = 0.9
#: The separator between the definitions of a symbol's path, as in `class A > def b`.
SEPARATOR = " > "
#: A file whose syntax errors (the bytes inside the parser's error nodes) are more than this
#: share of it is read by lines. Grammars are imperfect and files are mid-edit: of the code
#: corpus's 1,343 real files read by a grammar, 9 have an error node, holding 0.0-11% of the
#: file where the error stays inside one definition and 84-100% where it swallows the class
#: around it (whose paths are lost then too), and none between (docs/parsing.md).
MAX_ERROR_SHARE = 0.2
#: A file with NUL bytes is binary when more than this share of its bytes is not text (NULs,
#: other control characters, bytes that are not UTF-8): 42-74% in executables, fonts,
#: compiled Python, PNG, ONNX and gzip files, 50% in UTF-16 text; a source file with a few
#: stray NULs is far below (20% in the corpus's broken-unbalanced.py, made to be hostile).
BINARY_SHARE = 0.3
_TEXT_CONTROLS = frozenset(b"\t\n\v\f\r")


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


#: `Grammar.symbols` value for a node whose keyword is its own first word (`struct`, `enum`,
#: `extension` for Swift's one node type of them; `receive` or `fallback` in Solidity).
OWN_KEYWORD = "*"


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
    #: Nodes at a file's top that name its scope, as the keyword they are named with (a
    #: Haskell module, a C# file-scoped namespace): every path of the file begins with it.
    scopes: dict[str, str] = field(default_factory=dict)
    #: How deeply nested (in nodes of the `symbols` types) a symbol may be: an XML file's
    #: root is no symbol but the elements in it are, and the elements in those are not.
    levels: tuple[int, int] = (0, 1 << 30)
    #: Definitions of one name one after the other are one symbol (Haskell's equations).
    merge: bool = False
    #: Comments at the end of a node are the next definition's: a TOML table ends where the
    #: next begins, so the comment above the next is inside the one before; Haskell's imports
    #: end with the comment above the first declaration.
    trailing: bool = False
    #: Sections by heading (HTML), not definitions.
    headings: bool = False


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
_PYTHON = Grammar(
    "python",
    "tree_sitter_python",
    "language",
    {"function_definition": "def", "class_definition": "class"},
    wrappers=frozenset({"decorated_definition"}),
)
_JAVASCRIPT = Grammar(
    "javascript",
    "tree_sitter_javascript",
    "language",
    _JS_SYMBOLS,
    wrappers=frozenset({"export_statement"}),
)
_BASH = Grammar("bash", "tree_sitter_bash", "language", {"function_definition": "function"})
_RUBY = Grammar(
    "ruby",
    "tree_sitter_ruby",
    "language",
    {
        "module": "module",
        "class": "class",
        "singleton_class": "class <<",
        "method": "def",
        "singleton_method": "def",
    },
)
_XML_LABEL_ATTRIBUTES = ("name", "match", "mode", "id", "key")

#: File extension → grammar. Each grammar is a small wheel of tree-sitter's own organisation
#: (or of the language's own community, for Solidity, Swift, Kotlin and Compact).
GRAMMARS: dict[str, Grammar] = {}
for _grammar, _extensions in (
    (_PYTHON, (".py", ".pyi", ".pyw")),
    (_JAVASCRIPT, (".js", ".mjs", ".cjs", ".jsx")),
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
    (_BASH, (".sh", ".bash")),
    (
        Grammar(
            "csharp",
            "tree_sitter_c_sharp",
            "language",
            {
                "namespace_declaration": "namespace",
                "class_declaration": "class",
                "struct_declaration": "struct",
                "interface_declaration": "interface",
                "record_declaration": "record",
                "enum_declaration": "enum",
                "method_declaration": "",
                "constructor_declaration": "",
                "property_declaration": "",
            },
            scopes={"file_scoped_namespace_declaration": "namespace"},
        ),
        (".cs",),
    ),
    (
        Grammar(
            "kotlin",
            "tree_sitter_kotlin",
            "language",
            {
                # `class` or `interface` (an enum and a data class are classes)
                "class_declaration": OWN_KEYWORD,
                "object_declaration": "object",
                "companion_object": "companion object",
                "function_declaration": "fun",
                "secondary_constructor": "constructor",
            },
            attached=frozenset({"line_comment", "block_comment"}),
        ),
        (".kt", ".kts"),
    ),
    (
        Grammar(
            "swift",
            "tree_sitter_swift",
            "language",
            {
                # struct, class, enum, extension or actor: one node type in this grammar
                "class_declaration": OWN_KEYWORD,
                "protocol_declaration": "protocol",
                "function_declaration": "func",
                "protocol_function_declaration": "func",
                "init_declaration": "init",
                "deinit_declaration": "deinit",
                "subscript_declaration": "subscript",
            },
            attached=frozenset({"comment", "multiline_comment"}),
        ),
        (".swift",),
    ),
    (_RUBY, (".rb", ".rake", ".gemspec", ".ru")),
    (
        Grammar(
            "haskell",
            "tree_sitter_haskell",
            "language",
            {
                "function": "",
                "bind": "",
                "data_type": "data",
                "newtype": "newtype",
                "type_synonym": "type",
                "type_family": "type family",
                "data_family": "data family",
                "class": "class",
                "instance": "instance",
            },
            # A type signature is written right above its function, as a comment is.
            attached=frozenset({"comment", "haddock", "signature", "pragma"}),
            scopes={"header": "module"},
            merge=True,
            trailing=True,
        ),
        (".hs",),
    ),
    (
        Grammar(
            "solidity",
            "tree_sitter_solidity",
            "language",
            {
                "contract_declaration": "contract",
                "interface_declaration": "interface",
                "library_declaration": "library",
                "function_definition": "function",
                "modifier_definition": "modifier",
                "constructor_definition": "constructor",
                "fallback_receive_definition": OWN_KEYWORD,
                "struct_declaration": "struct",
                "enum_declaration": "enum",
            },
        ),
        (".sol",),
    ),
    (
        Grammar(
            "compact",
            "tree_sitter_compact",
            "language",
            {
                "mdefn": "module",
                "cdefn": "circuit",
                "ecdecl": "contract",
                "ecdecl_circuit": "circuit",
                "ldecl": "ledger",
                "wdecl": "witness",
                "lconstructor": "constructor",
                "struct": "struct",
                "enumdef": "enum",
            },
        ),
        (".compact",),
    ),
    (
        Grammar(
            "toml",
            "tree_sitter_toml",
            "language",
            {"table": "", "table_array_element": ""},
            trailing=True,
        ),
        (".toml",),
    ),
    (
        Grammar("yaml", "tree_sitter_yaml", "language", {"block_mapping_pair": ""}, levels=(0, 1)),
        (".yaml", ".yml"),
    ),
    (
        Grammar("html", "tree_sitter_html", "language", {}, headings=True),
        (".html", ".htm", ".xhtml"),
    ),
    (
        Grammar(
            "xml",
            "tree_sitter_xml",
            "language_xml",
            {"element": ""},
            # The text between two elements is no part of either: a comment above one is its.
            attached=frozenset({"Comment", "CharData"}),
            levels=(1, 1),
        ),
        (".xml", ".xsl", ".xslt", ".xsd", ".csproj", ".props", ".targets"),
    ),
):
    for _extension in _extensions:
        GRAMMARS[_extension] = _grammar

#: File names that say their language without an extension.
NAMED: dict[str, Grammar] = {
    name: _RUBY for name in ("Gemfile", "Rakefile", "Guardfile", "Podfile", "Vagrantfile")
}
#: The interpreter a `#!` line names (without its version: `python3.12` is `python`) → grammar.
INTERPRETERS: dict[str, Grammar] = {
    "bash": _BASH,
    "sh": _BASH,
    "dash": _BASH,
    "ksh": _BASH,
    "python": _PYTHON,
    "node": _JAVASCRIPT,
    "nodejs": _JAVASCRIPT,
    "ruby": _RUBY,
}
_SHEBANG = re.compile(r"#![ \t]*(\S+)([^\n]*)")


def grammar_for(path: str, text: str = "") -> Grammar | None:
    """The grammar for a file by its extension, its name, or (a file with no extension) the
    interpreter its first line names in `text`; None when vaultd has none for it."""
    name = PurePosixPath(path)
    found = GRAMMARS.get(name.suffix.lower()) or NAMED.get(name.name)
    if found is None and not name.suffix:
        return interpreter_grammar(text)
    return found


def interpreter_grammar(text: str) -> Grammar | None:
    """The grammar of the interpreter a `#!` first line names: `#!/bin/sh`,
    `#!/usr/bin/env bash`, `#!/usr/bin/env -S node --flag`, `#!/usr/bin/python3.12`."""
    match = _SHEBANG.match(text)
    if match is None:
        return None
    program, rest = PurePosixPath(match[1]).name, match[2].split()
    if program == "env":
        # The first word that is neither an option nor a variable is the program.
        words = [w for w in rest if not w.startswith("-") and "=" not in w]
        program = PurePosixPath(words[0]).name if words else ""
    return INTERPRETERS.get(re.sub(r"[\d.]+$", "", program))


@cache
def _language(module: str, function: str) -> Any:
    # Imported on first use: most vaults index no code, and each grammar is a shared library.
    from tree_sitter import Language

    pointer = getattr(importlib.import_module(module), function)()
    with warnings.catch_warnings():
        # tree-sitter-solidity's binding still returns a bare int (tree-sitter 0.25 wants a
        # capsule and warns); it is read right for every 0.25 release, which the pin holds.
        warnings.simplefilter("ignore", DeprecationWarning)
        return Language(pointer)


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
    """A definition: its 0-based first and last rows (with what is attached), its node (None
    for definitions merged into one) and how deeply it is nested."""

    first: int
    last: int
    label: str
    node: Any | None
    level: int


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
        grammar = grammar_for(path, text)
        spans = _spans(grammar, text, window, errors)
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
            location=Location(symbol=SEPARATOR.join(span.path) or None),
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


def _spans(grammar: Grammar | None, text: str, window: _Window, errors: list[str]) -> list[_Span]:
    """The file's spans by `grammar` (by lines without one), a reason in `errors` for a file
    read by lines though it has a grammar."""
    last = len(window.lines) - 1
    if grammar is None:
        return window.cut(0, last, ())
    encoded = text.encode("utf-8")
    root = _parser(grammar).parse(encoded).root_node
    if root.has_error:
        inside, row = _syntax_errors(root)
        share = inside / max(1, len(encoded))
        if share > MAX_ERROR_SHARE:
            errors.append(
                f"does not parse as {grammar.name} (error at line {row + 1}, {share:.0%} of the "
                "file in error); indexed by lines, not by symbol"
            )
            return window.cut(0, last, ())
    if grammar.headings:
        return _sections(root, window)
    splitter = _Splitter(grammar, window, root)
    spans = splitter.split(root, 0, last, _scope(grammar, root), 0)
    crowded = splitter.crowded()
    if crowded is not None:
        row, count = crowded
        errors.append(
            f"definitions share line {row + 1}, too long for one chunk ({count} characters: "
            "minified?); indexed by lines, not by symbol"
        )
        return window.cut(0, last, ())
    return spans


def _syntax_errors(root: Any) -> tuple[int, int]:
    """(bytes inside the parse's error nodes, the row of its first innermost error: a missing
    token or an error node with none inside) of the tree under `root`."""
    inside = 0
    first: int | None = None
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, within = stack.pop()
        if node.is_error and not within:
            inside += node.end_byte - node.start_byte  # an error inside it is counted with it
        wrong = [c for c in node.children if c.is_error or c.is_missing or c.has_error]
        if (node.is_error and not wrong) or node.is_missing:
            row = int(node.start_point[0])
            first = row if first is None else min(first, row)
        stack.extend((child, within or node.is_error) for child in wrong)
    return inside, first or 0


def _decode(data: bytes, path: str) -> tuple[str, list[str]]:
    errors: list[str] = []
    nuls = data.count(0)
    if nuls:
        share = _not_text(data) / len(data)
        if share > BINARY_SHARE:
            raise LeftOutError(
                path,
                f"binary content ({share:.0%} of it is no text, NUL bytes among it); not "
                "source code, skipped",
                "binary",
            )
        data = data.replace(b"\x00", "\ufffd".encode())
        errors.append(f"{nuls} NUL byte{'s' if nuls > 1 else ''} replaced with U+FFFD")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        errors.append(f"invalid UTF-8 at byte {exc.start}: replaced with U+FFFD")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, errors


def _not_text(data: bytes) -> int:
    """How many of `data`'s bytes are no text: control characters other than whitespace
    (NUL among them), and bytes that are not UTF-8."""
    controls = sum(data.count(bytes([c])) for c in range(32) if c not in _TEXT_CONTROLS)
    decoded = data.decode("utf-8", errors="replace")
    valid = len(decoded.encode("utf-8")) - decoded.count("\ufffd") * 3
    return controls + max(0, len(data) - valid)


def _scope(grammar: Grammar, root: Any) -> tuple[str, ...]:
    """The path every symbol of the file begins with: its module or namespace, if any."""
    for child in root.named_children:
        keyword = grammar.scopes.get(child.type)
        if keyword is not None:
            name = child.child_by_field_name("module") or child.child_by_field_name("name")
            return (f"{keyword} {_text(name)}".strip(),) if name is not None else ()
    return ()


class _Window:
    """The file's lines with their token counts, and the line window over any range of them."""

    def __init__(self, lines: list[str], counter: Counter, budget: int) -> None:
        self.lines = lines
        self.counter = counter
        self.budget = budget
        # One tokenizer call for the whole file; a range's count is a difference of sums, which
        # is exact for a tokenizer that splits at whitespace and close for any other. Each
        # distinct line is counted once: 41% of the code corpus's lines repeat one of their
        # file's (braces, blank lines, `end`), and the tokenizer took half the time for it.
        distinct = list(dict.fromkeys(lines))
        counted = dict(zip(distinct, counter.count_many(distinct), strict=True))
        self.counts = [counted[line] for line in lines]
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

    def __init__(self, grammar: Grammar, window: _Window, root: Any) -> None:
        self.grammar = grammar
        self.window = window
        #: Rows a definition began on after another took them (one-liners side by side).
        self._shared: set[int] = set()
        self._inside = _nesting(grammar, root)

    def split(
        self, node: Any, first: int, last: int, path: tuple[str, ...], level: int
    ) -> list[_Span]:
        """The spans of rows `first`..`last`, the extent of `node` (the root or a symbol)
        nested `level` symbols deep."""
        inner = self._symbols(node, level) if node is not None else []
        if not inner:
            return self.window.cut(first, last, path)
        spans: list[_Span] = []
        row = first
        for symbol in inner:
            if symbol.first < row or symbol.last > last:
                self._shared.add(symbol.first)
                continue  # on a line another symbol has
            spans.extend(self._gap(row, symbol.first - 1, path))
            inner_path = (*path, symbol.label)
            if self.window.fits(symbol.first, symbol.last):
                trimmed = self.window.trim(symbol.first, symbol.last)
                if trimmed:
                    spans.append(_Span(*trimmed, inner_path))
            else:
                spans.extend(
                    self.split(symbol.node, symbol.first, symbol.last, inner_path, symbol.level)
                )
            row = symbol.last + 1
        spans.extend(self._gap(row, last, path))
        return spans

    def crowded(self) -> tuple[int, int] | None:
        """(row, characters) of the first line that definitions share and that is too long
        for one chunk: there, blocks by lines cannot tell the definitions apart."""
        for row in sorted(self._shared):
            if self.window.counts[row] > self.window.budget:
                return row, len(self.window.lines[row])
        return None

    def _gap(self, first: int, last: int, path: tuple[str, ...]) -> list[_Span]:
        return self.window.cut(first, last, path) if first <= last else []

    def _symbols(self, node: Any, level: int) -> list[_Symbol]:
        """The definitions inside `node` that no other definition inside it holds."""
        low, high = self.grammar.levels
        found: list[_Symbol] = []
        stack = [(child, level) for child in reversed(self._inside.get(node.id, []))]
        while stack:
            child, depth = stack.pop()
            definition = self._definition(child)
            if definition is None or depth < low:
                deeper = depth if definition is None else depth + 1
                stack.extend((c, deeper) for c in reversed(self._inside.get(child.id, [])))
                continue
            label = self._label(definition) if depth <= high else ""
            if label:
                first = self._attached_first(child)
                found.append(_Symbol(first, self._last_row(child), label, definition, depth + 1))
        return self._merged(found) if self.grammar.merge else found

    @staticmethod
    def _merged(found: list[_Symbol]) -> list[_Symbol]:
        # A function written as several equations is one symbol; it cannot be opened.
        merged: list[_Symbol] = []
        for symbol in found:
            if merged and merged[-1].label == symbol.label:
                before = merged.pop()
                symbol = _Symbol(before.first, symbol.last, symbol.label, None, symbol.level)
            merged.append(symbol)
        return merged

    def _definition(self, node: Any) -> Any | None:
        if not node.is_named:
            return None  # a keyword token named as its definition is (Ruby's `module`)
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
        for previous in self._above(node):
            if previous.end_point[0] < first - 1:
                break  # a blank line between: a comment about what is above, not this
            if not bytes(previous.text).strip():
                if bytes(previous.text).count(b"\n") > 1:
                    break  # the same, in XML's text between elements
                continue
            row, column = previous.start_point
            if self.window.lines[row].encode("utf-8")[:column].strip():
                break  # a comment after code on its line is about that code
            first = int(row)
        return first

    def _above(self, node: Any) -> Iterator[Any]:
        """The nodes right above `node` that may belong to it, nearest first."""
        previous = self._before(node)
        while previous is not None and previous.type in self.grammar.attached:
            yield previous
            previous = self._before(previous)

    def _before(self, node: Any) -> Any | None:
        attached = self.grammar.attached
        previous = node.prev_sibling
        parent = node.parent
        if previous is None and parent is not None and parent.type not in self.grammar.symbols:
            # The first definition of a body: the comment above it is the body's sibling
            # (Ruby), or ends the node before (Haskell's imports).
            previous = parent.prev_sibling
        if self.grammar.trailing and previous is not None and previous.type not in attached:
            return previous.children[-1] if previous.children else None
        return previous

    def _last_row(self, node: Any) -> int:
        if self.grammar.trailing:
            own = [c for c in node.children if c.type not in self.grammar.attached]
            node = own[-1] if own else node
        return _last_row(node)

    def _label(self, node: Any) -> str:
        keyword = self.grammar.symbols.get(node.type, "function")
        if keyword == OWN_KEYWORD:
            keyword = _own_keyword(node)
        if node.type == "method_declaration" and self.grammar.name == "go":
            receiver = node.child_by_field_name("receiver")
            name = _name(node)
            name = f"{_text(receiver)} {name}" if receiver is not None else name
        else:
            name = _NAMERS.get(node.type, _name)(node)
        if not name and keyword in ("", "function"):
            return ""  # nothing to call it by (a Haskell pattern binding): plain code
        return f"{keyword} {name}".strip()


def _nesting(grammar: Grammar, root: Any) -> dict[int, list[Any]]:
    """Node id → the nodes that may be definitions (`_Splitter._definition`) right inside it,
    none between: found by one query in the grammar's own code, not by a walk of every node
    in Python, which took twice as long as the parse."""
    from tree_sitter import QueryCursor

    kinds = {*grammar.symbols, *grammar.wrappers, "lexical_declaration", "variable_declaration"}
    query = _query(grammar.module, grammar.function, frozenset(kinds))
    captured = QueryCursor(query).captures(root) if query is not None else {}
    found = sorted(
        (node for nodes in captured.values() for node in nodes),
        key=lambda n: (n.start_byte, -n.end_byte),
    )
    inside: dict[int, list[Any]] = {}
    holders = [root]
    for node in found:
        while len(holders) > 1 and holders[-1].end_byte <= node.start_byte:
            holders.pop()
        inside.setdefault(holders[-1].id, []).append(node)
        holders.append(node)
    return inside


@cache
def _query(module: str, function: str, kinds: frozenset[str]) -> Any | None:
    """The query capturing every node of these kinds the language has (None if none)."""
    from tree_sitter import Query

    language = _language(module, function)
    known = sorted(k for k in kinds if language.id_for_node_kind(k, True) is not None)
    if not known:
        return None
    return Query(language, "[" + " ".join(f"({k})" for k in known) + "] @definition")


def _last_row(node: Any) -> int:
    """The last row holding some of `node` (one ending at a line's start holds none of it)."""
    row, column = node.end_point
    return int(row) - 1 if column == 0 and row > node.start_point[0] else int(row)


def _own_keyword(node: Any) -> str:
    kind = node.child_by_field_name("declaration_kind")
    if kind is not None:
        return _text(kind)
    words = [c.type for c in node.children if not c.is_named and c.type.isidentifier()]
    return words[0] if words else ""


def _name(node: Any) -> str:
    for field_name in ("name", "declarator", "id"):
        child = node.child_by_field_name(field_name)
        while child is not None and field_name == "declarator":
            inner = child.child_by_field_name("declarator")
            if inner is None:
                break
            child = inner
        if child is not None:
            return _text(child)
    declarators = [c for c in node.named_children if c.type == "variable_declarator"]
    if declarators:
        return _name(declarators[0])
    for child in node.named_children:
        # A name without a field: Kotlin's and Compact's (`struct_name`, `contract_name`).
        if child.type in ("identifier", "type_identifier") or child.type.endswith("_name"):
            return _text(child)
    return ""


def _impl_name(node: Any) -> str:
    trait = node.child_by_field_name("trait")
    kind = node.child_by_field_name("type")
    return " for ".join(_text(n) for n in (trait, kind) if n is not None)


def _instance_name(node: Any) -> str:
    # `instance ToJSON Value`: the class and the types it is an instance for.
    parts = (node.child_by_field_name(f) for f in ("name", "patterns"))
    return " ".join(_text(n) for n in parts if n is not None)


def _singleton_method_name(node: Any) -> str:
    target = node.child_by_field_name("object")
    name = _name(node)
    return f"{_text(target)}.{name}" if target is not None else name


def _singleton_class_name(node: Any) -> str:
    value = node.child_by_field_name("value")
    return _text(value) if value is not None else ""


def _table_name(node: Any) -> str:
    # `[tool.ruff]`, `[[bin]]`: the header as written, spaces aside.
    key = node.named_children[0] if node.named_children else None
    brackets = 2 if node.type == "table_array_element" else 1
    return "[" * brackets + (_text(key) if key is not None else "") + "]" * brackets


def _key_name(node: Any) -> str:
    key = node.child_by_field_name("key")
    return _text(key) if key is not None else ""


def _element_name(node: Any) -> str:
    """`xsl:template match="db:para" mode="m:docbook"`: the tag, and the attributes that
    tell elements of one tag apart."""
    tag = next((c for c in node.named_children if c.type in ("STag", "EmptyElemTag")), None)
    if tag is None:
        return ""
    name = next((c for c in tag.named_children if c.type == "Name"), None)
    said = [_text(name)] if name is not None else []
    for attribute in tag.named_children:
        if attribute.type != "Attribute" or not attribute.named_children:
            continue
        key = _text(attribute.named_children[0])
        if key in _XML_LABEL_ATTRIBUTES and len(attribute.named_children) > 1:
            said.append(f"{key}={_text(attribute.named_children[1])}")
    return " ".join(said)


#: Node types named otherwise than by their `name` field.
_NAMERS: dict[str, Callable[[Any], str]] = {
    "impl_item": _impl_name,
    "instance": _instance_name,
    "singleton_method": _singleton_method_name,
    "singleton_class": _singleton_class_name,
    "table": _table_name,
    "table_array_element": _table_name,
    "block_mapping_pair": _key_name,
    "element": _element_name,
    "constructor_definition": lambda node: "",
    "fallback_receive_definition": lambda node: "",
    "init_declaration": lambda node: "",
    "deinit_declaration": lambda node: "",
    "lconstructor": lambda node: "",
}


def _sections(root: Any, window: _Window) -> list[_Span]:
    """An HTML page's sections: each runs from its heading to the next one, named by the
    path of headings it is under (as a Markdown note's sections are); what comes before the
    first heading has none."""
    spans: list[_Span] = []
    path: list[tuple[int, str]] = []
    row = 0
    for start, level, title in _headings(root):
        if start < row:
            continue  # a heading on the line of the one before: that section holds it
        spans.extend(window.cut(row, start - 1, tuple(t for _, t in path)))
        path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
        row = start
    spans.extend(window.cut(row, len(window.lines) - 1, tuple(t for _, t in path)))
    return spans


def _headings(root: Any) -> Iterator[tuple[int, int, str]]:
    """(row, level, text) of each `<h1>`…`<h6>` of an HTML tree, in order."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "element":
            tag = node.named_children[0] if node.named_children else None
            name = tag.named_children[0] if tag is not None and tag.named_children else None
            word = _text(name).lower() if name is not None else ""
            if re.fullmatch(r"h[1-6]", word):
                words = " ".join(_text(t) for t in _descendants(node, "text"))
                yield int(node.start_point[0]), int(word[1]), words or word
                continue
        stack.extend(reversed(node.children))


def _descendants(node: Any, kind: str) -> Iterator[Any]:
    stack = [node]
    while stack:
        found = stack.pop()
        if found.type == kind:
            yield found
        else:
            stack.extend(reversed(found.children))


def _text(node: Any) -> str:
    return " ".join(bytes(node.text).decode("utf-8", errors="replace").split())


def extensions() -> Sequence[str]:
    """Every extension vaultd parses by symbol (for `vaultd inspect` and the docs)."""
    return sorted(GRAMMARS)
