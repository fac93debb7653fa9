"""Source code by symbol: real modules of an installed package, and a real project in each
language of ../shared/corpora/code, parsed by tree-sitter."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
import pytest

from tests.conftest import shared_path
from vaultd.config import load_config
from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import NoteError
from vaultd.index.open import open_index
from vaultd.pipeline import code
from vaultd.query import SearchQuery
from vaultd.records import Note

CLICK = Path(click.__file__).parent
BUDGET = 256


@pytest.fixture(scope="module")
def click_vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few of click's own modules, copied into a vault as a user's code would be."""
    vault = tmp_path_factory.mktemp("vault")
    for name in ("decorators.py", "core.py", "utils.py"):
        shutil.copy(CLICK / name, vault / name)
    return vault


def extract(vault: Path, name: str, counter: TokenCounter) -> Note:
    return code.extract(name, (vault / name).read_bytes(), counter=counter, max_tokens=BUDGET)


def block_with(note: Note, words: str) -> str | None:
    """The symbol of the one block whose text holds `words`."""
    found = [b.location.symbol for b in note.blocks if words in b.text]
    assert len(found) == 1, found
    return found[0]


def test_a_docstring_is_in_the_block_of_its_symbol(
    click_vault: Path, counter: TokenCounter
) -> None:
    note = extract(click_vault, "decorators.py", counter)
    assert note.errors == () and note.kind == "code" and note.title == "decorators"
    assert block_with(note, "Marks a callback as wanting to receive the current context") == (
        "def pass_context"
    )
    core = extract(click_vault, "core.py", counter)
    # Context is far bigger than a chunk: its methods are blocks of their own, by path.
    assert block_with(core, "Create a new context of the same type as this context") == (
        "class Context > def _make_sub_context"
    )
    assert block_with(core, "this invokes the attached callback (if it exists)") == (
        "class Command > def invoke"
    )


def test_blocks_cover_every_line_once_in_order_within_the_budget(
    click_vault: Path, counter: TokenCounter
) -> None:
    window = int(BUDGET * code.WINDOW_SHARE)
    for name in ("decorators.py", "core.py", "utils.py"):
        lines = (click_vault / name).read_text().split("\n")
        note = extract(click_vault, name, counter)
        seen: list[int] = []
        for block in note.blocks:
            assert block.kind == "code" and block.info == "python"
            assert block.text == "\n".join(lines[block.start_line - 1 : block.end_line])
            assert counter.count(block.text) <= window, (name, block.start_line)
            seen.extend(range(block.start_line, block.end_line + 1))
        assert seen == sorted(set(seen)), f"{name}: blocks overlap or are out of order"
        content = {i for i, line in enumerate(lines, start=1) if line.strip()}
        assert content <= set(seen), f"{name}: lines left out: {sorted(content - set(seen))[:5]}"


def test_comments_and_decorators_above_a_symbol_belong_to_it(counter: TokenCounter) -> None:
    source = b"""import os


# The one place the path is made.
@staticmethod
def where() -> str:
    return os.getcwd()


# A note about the module, then a blank line.

def other() -> None:
    pass
"""
    note = code.extract("m.py", source, counter=counter)
    assert [(b.location.symbol, b.start_line, b.end_line) for b in note.blocks] == [
        (None, 1, 1),
        ("def where", 4, 7),
        (None, 10, 10),
        ("def other", 12, 13),
    ]
    assert [b.headings for b in note.blocks] == [(), ("def where",), (), ("def other",)]


@pytest.mark.parametrize(
    ("name", "source", "symbols"),
    [
        (
            "widget.rs",
            "/// A widget.\nstruct Widget;\n\nimpl Widget {\n    /// Draws it.\n"
            "    fn render(&self) {\n" + "        draw();\n" * 200 + "    }\n}\n",
            {"struct Widget", "impl Widget", "impl Widget > fn render"},
        ),
        (
            "app.ts",
            "export class App {\n  start(): void {\n" + "    run();\n" * 200 + "  }\n}\n"
            "export const stop = () => 1;\ninterface Shape { area(): number }\n",
            {"class App", "class App > start", "function stop", "interface Shape"},
        ),
        (
            "main.go",
            "package main\n\n// T is a thing.\ntype T struct{}\n\n"
            "func (t *T) Run() {}\n\nfunc main() {}\n",
            {None, "type T", "func (t *T) Run", "func main"},
        ),
    ],
)
def test_other_languages_by_symbol(
    name: str, source: str, symbols: set[str], counter: TokenCounter
) -> None:
    note = code.extract(name, source.encode(), counter=counter)
    assert note.errors == ()
    assert {b.location.symbol for b in note.blocks} == symbols


def test_a_file_without_a_grammar_is_cut_by_the_line_window(counter: TokenCounter) -> None:
    lines = [f"local value_{i} = compute({i}, 'some words to count')" for i in range(300)]
    note = code.extract("script.lua", "\n".join(lines).encode(), counter=counter)
    window = int(BUDGET * code.WINDOW_SHARE)
    assert all(b.location.symbol is None and b.info == "" for b in note.blocks)
    assert note.blocks[0].start_line == 1 and note.blocks[-1].end_line == 300
    for block, after in zip(note.blocks, note.blocks[1:], strict=False):
        assert after.start_line == block.end_line + 1  # no overlap, no gap
        assert counter.count(block.text) <= window
        # Packed: the next line would not have fitted.
        assert counter.count(block.text + "\n" + lines[after.start_line - 1]) > window * 0.9


def test_a_file_that_does_not_parse_falls_back_to_lines(counter: TokenCounter) -> None:
    source = b"def broken(:\n    return [1, 2\n\ndef fine(:\n    return {3: (4\n"
    note = code.extract("bad.py", source, counter=counter)
    assert note.errors == (
        "does not parse as python (error at line 1, 70% of the file in error); indexed by "
        "lines, not by symbol",
    )
    assert [(b.location.symbol, b.start_line, b.end_line) for b in note.blocks] == [(None, 1, 5)]


#: One real file of each language added, and paths of definitions in it as a person writes
#: them: (file under ../shared/corpora/code, grammar, symbols it must have).
CORPUS_FILES = [
    (
        "fluentvalidation/AbstractValidator.cs",
        "csharp",
        {
            "namespace FluentValidation > class AbstractValidator > ValidateInternalAsync",
            "namespace FluentValidation > class AbstractValidator > RuleLevelCascadeMode",
        },
    ),
    (
        "kotlinpoet/kotlinpoet/src/jvmMain/kotlin/com/squareup/kotlinpoet/CodeBlock.kt",
        "kotlin",
        {
            "class CodeBlock > class Builder > fun addNamed",
            "class CodeBlock > companion object > fun of",
            "fun buildCodeBlock",
        },
    ),
    (
        "swift-argument-parser/Sources/ArgumentParser/Parsable Types/ParsableArguments.swift",
        "swift",
        {"extension ParsableArguments > func parseOrExit", "struct _WrappedParsableCommand"},
    ),
    (
        "rack/lib/rack/request.rb",
        "ruby",
        {
            "module Rack > class Request > class Headers > def env_to_header_key",
            "module Rack > class Request > module Helpers > def forwarded_for",
        },
    ),
    (
        "aeson/src/Data/Aeson/Types/Internal.hs",
        "haskell",
        {
            "module Data.Aeson.Types.Internal > instance Functor IResult",
            "module Data.Aeson.Types.Internal > data Value",
            "module Data.Aeson.Types.Internal > iparse",
        },
    ),
    (
        "openzeppelin-contracts/contracts/token/ERC20/ERC20.sol",
        "solidity",
        {"contract ERC20 > function transfer", "contract ERC20 > function _spendAllowance"},
    ),
    (
        "openzeppelin-compact-contracts/contracts/src/access/Ownable.compact",
        "compact",
        {
            "module Ownable > circuit transferOwnership",
            "module Ownable > ledger _owner",
            "module Ownable > witness wit_OwnableSK",
        },
    ),
    (
        "midnight-example-counter/contract/src/counter.compact",
        "compact",
        {"ledger round", "circuit increment"},
    ),
    (
        "alacritty-theme/themes/dracula.toml",
        "toml",
        {"[colors.primary]", "[colors.normal]", "[colors.bright]"},
    ),
    ("starter-workflows/pages/hugo.yml", "yaml", {"on", "jobs > build", "jobs > deploy"}),
    (
        "bootstrap-examples/sass-js/index.html",
        "html",
        {"Get started with Bootstrap", "Get started with Bootstrap > Guides"},
    ),
    (
        "docbook-xslTNG/src/main/xslt/modules/titles.xsl",
        "xml",
        {'xsl:template name="tp:format-number"', 'xsl:function name="fp:title-properties"'},
    ),
    # No extension: the grammar is the one its `#!/usr/bin/env bash` names.
    ("bats-core/bin/bats", "bash", {"function fallback_to_readlinkf_posix"}),
]


@pytest.mark.parametrize(
    ("rel", "grammar", "symbols"), CORPUS_FILES, ids=[rel for rel, _, _ in CORPUS_FILES]
)
def test_a_real_file_of_each_language_by_its_definitions(
    rel: str, grammar: str, symbols: set[str], counter: TokenCounter
) -> None:
    path = shared_path("corpora", "code", rel)
    data = path.read_bytes()
    note = code.extract(rel, data, counter=counter, max_tokens=BUDGET)
    assert note.errors == ()
    assert {b.info for b in note.blocks} == {grammar}
    assert symbols <= {b.location.symbol for b in note.blocks}
    # Every line once, in order, within the budget.
    lines = code._decode(data, rel)[0].split("\n")
    seen: list[int] = []
    for block in note.blocks:
        assert block.text == "\n".join(lines[block.start_line - 1 : block.end_line])
        assert counter.count(block.text) <= int(BUDGET * code.WINDOW_SHARE)
        seen.extend(range(block.start_line, block.end_line + 1))
    assert seen == sorted(set(seen))
    assert {i for i, line in enumerate(lines, start=1) if line.strip()} <= set(seen)


def test_the_broken_files_of_the_corpus_are_read_by_lines_with_their_reasons(
    counter: TokenCounter,
) -> None:
    folder = shared_path("corpora", "code", "broken")
    reasons = {}
    for path in sorted(folder.iterdir()):
        note = code.extract(path.name, path.read_bytes(), counter=counter)
        assert note.blocks and {b.location.symbol for b in note.blocks} == {None}
        reasons[path.name] = note.errors
    assert reasons == {
        "broken-oneline.ts": (
            "definitions share line 1, too long for one chunk (201876 characters: minified?); "
            "indexed by lines, not by symbol",
        ),
        "broken-truncated.rs": (
            "does not parse as rust (error at line 1, 100% of the file in error); indexed by "
            "lines, not by symbol",
        ),
        # A few NULs among source: still source, NULs replaced.
        "broken-unbalanced.py": (
            "3 NUL bytes replaced with U+FFFD",
            "invalid UTF-8 at byte 404: replaced with U+FFFD",
            "does not parse as python (error at line 5, 100% of the file in error); indexed by "
            "lines, not by symbol",
        ),
    }


def test_a_stray_error_in_one_real_function_keeps_the_rest_by_symbol(
    counter: TokenCounter,
) -> None:
    rel = "swift-argument-parser/Examples/count-lines/CountLines.swift"
    # The grammar does not know `for try await` (11% of the file in its error node).
    note = code.extract(rel, shared_path("corpora", "code", rel).read_bytes(), counter=counter)
    assert note.errors == ()
    symbols = [b.location.symbol for b in note.blocks]
    assert "struct CountLines > func printCount" in symbols
    assert "struct CountLines > func run" in symbols


def test_a_minified_line_longer_than_the_budget_is_cut_on_that_line(
    counter: TokenCounter,
) -> None:
    line = "var a=" + "+".join(f"f{i}(x)" for i in range(2000)) + ";"
    note = code.extract("app.min.js", line.encode(), counter=counter)
    assert len(note.blocks) > 1
    assert all((b.start_line, b.end_line) == (1, 1) for b in note.blocks)
    assert all(counter.count(b.text) <= int(BUDGET * code.WINDOW_SHARE) for b in note.blocks)


def test_a_parser_crash_costs_one_file_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, click_vault: Path
) -> None:
    def crash(grammar: code.Grammar) -> object:
        raise MemoryError("grammar blew up")

    # The fault is injected; the file around it is real.
    monkeypatch.setattr(code, "_parser", crash)
    with pytest.raises(NoteError, match=r"utils\.py: cannot parse \(MemoryError: grammar blew"):
        code.extract("utils.py", (click_vault / "utils.py").read_bytes())
    monkeypatch.undo()
    assert code.extract("utils.py", (click_vault / "utils.py").read_bytes()).blocks


def test_a_docstring_finds_its_symbol_through_a_real_index(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    (vault / "lib").mkdir(parents=True)
    shutil.copy(CLICK / "globals.py", vault / "lib" / "globals.py")
    (vault / "Reading.md").write_text("# Reading\n\nNotes on command-line tools.\n")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[log]\nlevel = "error"\n[attachments]\ncode = ["lib/**/*.py"]\n'
    )
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
        hits = index.searcher.search(
            SearchQuery("Internal helper to get the default value of the color flag", k=3)
        ).hits
    assert hits, "no hit"
    hit = hits[0]
    symbol = "def resolve_color_default"
    assert (hit.path, hit.kind, hit.location.symbol) == ("lib/globals.py", "code", symbol)
    assert hit.section == symbol  # the symbol path is its section too
    source = (vault / "lib" / "globals.py").read_text().split("\n")
    assert source[hit.start_line - 1].startswith(symbol)
