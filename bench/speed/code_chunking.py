"""Symbol chunking by language: `extract` against tree-sitter's bare parse of the same files.

Every file of the code corpus (../shared/corpora/code, or CORPUS) that vaultd reads with a
grammar is, per language, parsed by tree-sitter alone (`Parser.parse` of its bytes) and read
by `vaultd.pipeline.code.extract`: with the embedding model's token counter, as the indexer
reads it, and with the rough count (a word or a punctuation mark a token), which leaves the
token counting out and times the chunker's own work. The model's counter counting each
distinct line of the files once, as `extract` has it count them, is timed alone too: the bound
it puts on `extract`. Each run's counter starts with no word known (`TokenCounter`: printable
ASCII is counted from its words, each new word encoded by the tokenizer), and the tokenizer's
own threads are off, as in the indexer's parser workers. The four are interleaved, each the
fastest of `--repeat` runs; reading the files is not timed. Then the installed size of the
grammar wheels the corpus's languages brought (issue 55), from their installed files. Usage:

    python -m bench.speed.code_chunking [CORPUS] [--repeat N] [--record NAME]

`--record NAME` writes the languages' table as NAME and the wheels' as NAME-grammars.
"""

from __future__ import annotations

import argparse
import collections
import importlib.metadata
import os
import time
from collections.abc import Callable
from pathlib import Path

from tree_sitter import Parser

from bench.lib.machine import machine
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter, load_tokenizer
from vaultd.pipeline import code

#: The grammars added for the smart-chunker seed's languages (issue 55).
ADDED = (
    "tree-sitter-c-sharp",
    "tree-sitter-kotlin",
    "tree-sitter-swift",
    "tree-sitter-ruby",
    "tree-sitter-haskell",
    "tree-sitter-solidity",
    "tree-sitter-compact",
    "tree-sitter-toml",
    "tree-sitter-yaml",
    "tree-sitter-html",
    "tree-sitter-xml",
)
Files = list[tuple[str, bytes]]


def by_language(root: Path) -> dict[str, Files]:
    """The files vaultd reads with a grammar, by the grammar's name (hidden files aside, as
    the indexer leaves them)."""
    found: dict[str, Files] = collections.defaultdict(list)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or any(part.startswith(".") for part in rel.split("/")):
            continue
        data = path.read_bytes()
        grammar = code.grammar_for(rel, data.decode("utf-8", "replace"))
        if grammar is not None:
            found[grammar.name].append((rel, data))
    return dict(sorted(found.items()))


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(files: Files, fresh: Callable[[], TokenCounter], repeat: int) -> list[float]:
    """The fastest [parse, count, extract with the model's counter, extract by rough count],
    in seconds."""
    first, data = files[0]
    grammar = code.grammar_for(first, data.decode("utf-8", "replace"))
    assert grammar is not None
    language = code._language(grammar.module, grammar.function)

    def parse() -> None:
        for _, raw in files:
            Parser(language).parse(raw)

    def extract(with_counter: TokenCounter | None) -> Callable[[], None]:
        def run() -> None:
            for rel, raw in files:
                code.extract(rel, raw, counter=with_counter)

        return run

    lines = [list(dict.fromkeys(raw.decode("utf-8", "replace").split("\n"))) for _, raw in files]

    def count(counter: TokenCounter) -> Callable[[], None]:
        def run() -> None:
            for distinct in lines:
                counter.count_many(distinct)

        return run

    best = [float("inf")] * 4
    for _ in range(repeat):
        # Each run's counter has seen no word yet, as at a first index's start: the language's
        # files teach it their words as the run goes, as they would the indexer's.
        runs = (parse, count(fresh()), extract(fresh()), extract(None))
        for i, run in enumerate(runs):
            best[i] = min(best[i], timed(run))
    return best


def installed_size(distribution: str) -> tuple[str, int]:
    """(version, bytes of its installed files)."""
    found = importlib.metadata.distribution(distribution)
    total = 0
    for file in found.files or []:
        path = Path(str(found.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return found.version, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPORA / "code")
    parser.add_argument("--repeat", type=int, default=3)
    add_record_option(parser)
    args = parser.parse_args()
    # As in the indexer's parser workers, which are the parallelism: the tokenizer's own
    # threads off (before it is loaded).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tokenizer = load_tokenizer(default_spec())
    print(f"machine: {machine()}; load {os.getloadavg()[0]:.2f}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    rows = []
    for name, files in by_language(args.corpus).items():
        size = sum(len(data) for _, data in files) / 1e6
        fresh = lambda: TokenCounter(tokenizer)  # noqa: E731
        parse_s, count_s, model_s, rough_s = measure(files, fresh, args.repeat)
        row = [
            name,
            f"{len(files)}",
            f"{size:.2f}",
            f"{size / parse_s:.1f}",
            f"{size / count_s:.2f}",
            f"{len(files) / model_s:,.0f}",
            f"{size / model_s:.2f}",
            f"{parse_s / model_s:.2f}",
            f"{size / rough_s:.2f}",
            f"{parse_s / rough_s:.2f}",
        ]
        print("  ".join(row), flush=True)
        rows.append(row)
    columns = [
        "language",
        "files",
        "MB",
        "parse MB/s",
        "counter MB/s",
        "extract files/s",
        "extract MB/s",
        "extract / parse",
        "rough count MB/s",
        "rough / parse",
    ]
    record(args.record, columns, rows)
    sizes = []
    for distribution in ADDED:
        version, size = installed_size(distribution)
        sizes.append([distribution, version, f"{size / 1e6:.2f}"])
    total = sum(float(row[2]) for row in sizes)
    sizes.append(["**all eleven**", "", f"**{total:.2f}**"])
    for row in sizes:
        print("  ".join(row))
    wheels = f"{args.record}-grammars" if args.record else None
    record(wheels, ["wheel", "version", "installed MB"], sizes)


if __name__ == "__main__":
    main()
