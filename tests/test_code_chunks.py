"""Source code by symbol: real modules of an installed package, parsed by tree-sitter."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
import pytest

from vaultd.config import load_config
from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import NoteError
from vaultd.index.open import open_index
from vaultd.pipeline import code
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
    found = [b.symbol for b in note.blocks if words in b.text]
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
    assert [(b.symbol, b.start_line, b.end_line) for b in note.blocks] == [
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
    assert {b.symbol for b in note.blocks} == symbols


def test_a_file_without_a_grammar_is_cut_by_the_line_window(counter: TokenCounter) -> None:
    lines = [f"local value_{i} = compute({i}, 'some words to count')" for i in range(300)]
    note = code.extract("script.lua", "\n".join(lines).encode(), counter=counter)
    window = int(BUDGET * code.WINDOW_SHARE)
    assert all(b.symbol is None and b.info == "" for b in note.blocks)
    assert note.blocks[0].start_line == 1 and note.blocks[-1].end_line == 300
    for block, after in zip(note.blocks, note.blocks[1:], strict=False):
        assert after.start_line == block.end_line + 1  # no overlap, no gap
        assert counter.count(block.text) <= window
        # Packed: the next line would not have fitted.
        assert counter.count(block.text + "\n" + lines[after.start_line - 1]) > window * 0.9


def test_a_file_that_does_not_parse_falls_back_to_lines(counter: TokenCounter) -> None:
    source = b"def broken(:\n    return 1\n\ndef fine():\n    return 2\n"
    note = code.extract("bad.py", source, counter=counter)
    assert note.errors and "does not parse as python" in note.errors[0]
    assert [(b.symbol, b.start_line, b.end_line) for b in note.blocks] == [(None, 1, 5)]


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
            "Internal helper to get the default value of the color flag", k=3
        )
    assert hits, "no hit"
    hit = hits[0]
    symbol = "def resolve_color_default"
    assert (hit.path, hit.kind, hit.symbol) == ("lib/globals.py", "code", symbol)
    assert hit.section == symbol  # the symbol path is its section too
    source = (vault / "lib" / "globals.py").read_text().split("\n")
    assert source[hit.start_line - 1].startswith(symbol)
