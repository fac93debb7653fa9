"""Source files by symbol: how fast, and how much of the code lands in a named symbol.

Every `.py` file of a few installed packages (their sources as a user's `code` glob would
take them) is read by `vaultd.pipeline.code.extract` with the real all-MiniLM-L6-v2 token
counter at the default budget, then chunked as the indexer does. Usage:

    python -m bench.speed.code_chunks [PACKAGE ...] [--repeat N]

PACKAGE names default to click, structlog, watchdog, pathspec and mistune (vaultd's own
dependencies, so installed wherever vaultd is).
The figure is the fastest of `--repeat` runs; reading the files is not timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

from bench.lib.machine import cpu_model
from bench.lib.results import add_record_option, record
from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter
from vaultd.pipeline import code
from vaultd.pipeline.chunk import DEFAULT_MAX_TOKENS, chunk_note

DEFAULT_PACKAGES = ("click", "structlog", "watchdog", "pathspec", "mistune")


def sources(packages: list[str]) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        files.extend(
            (f"{name}/{p.relative_to(root).as_posix()}", p.read_bytes())
            for p in sorted(root.rglob("*.py"))
        )
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=list(DEFAULT_PACKAGES))
    parser.add_argument("--repeat", type=int, default=3)
    add_record_option(parser)
    args = parser.parse_args()
    counter = TokenCounter.for_spec(default_spec())
    files = sources(args.packages)
    lines = sum(data.count(b"\n") for _, data in files)
    best_extract = best_chunk = float("inf")
    for _ in range(args.repeat):
        blocks = named = chunks = 0
        extract_s = chunk_s = 0.0
        for path, data in files:
            started = time.perf_counter()
            note = code.extract(path, data, counter=counter, max_tokens=DEFAULT_MAX_TOKENS)
            extracted = time.perf_counter()
            chunks += len(chunk_note(note, counter, DEFAULT_MAX_TOKENS))
            chunk_s += time.perf_counter() - extracted
            extract_s += extracted - started
            blocks += len(note.blocks)
            named += sum(b.end_line - b.start_line + 1 for b in note.blocks if b.location.symbol)
        best_extract, best_chunk = min(best_extract, extract_s), min(best_chunk, chunk_s)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"packages: {', '.join(args.packages)}")
    print(f"files {len(files)}, lines {lines}, blocks {blocks}, chunks {chunks}")
    print(f"lines in a named symbol: {named / max(1, lines):.1%}")
    print(
        f"extract {best_extract:.2f} s ({lines / best_extract:,.0f} lines/s), "
        f"chunk {best_chunk:.2f} s (best of {args.repeat})"
    )
    columns = ["load", "files", "lines", "blocks", "chunks", "lines in a named symbol"]
    row = [f"{os.getloadavg()[0]:.1f}", *(f"{n:,}" for n in (len(files), lines, blocks, chunks))]
    row += [f"{named / max(1, lines):.1%}", f"{best_extract:.2f} s", f"{best_chunk:.2f} s"]
    record(args.record, [*columns, "extract", "chunk"], [row], align=["right"] * 8)


if __name__ == "__main__":
    main()
