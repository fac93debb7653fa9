"""Parse and chunk every note of a vault with the real tokenizer, and time it.

Parsing and chunking must never be the bottleneck beside embedding. Usage:

    python -m bench.speed.parse_chunk [VAULT] [--max-tokens N] [--repeat N]

VAULT defaults to ../shared/corpora/obsidian-hub beside the checkout. Reading the files is timed
apart from parsing and chunking; the tokenizer is loaded (and its hash verified) before timing.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter
from vaultd.errors import NoteError
from vaultd.pipeline.chunk import DEFAULT_MAX_TOKENS, chunk_note
from vaultd.pipeline.parse import parse_note

DEFAULT_VAULT = CORPORA / "obsidian-hub"


@dataclass
class Totals:
    notes: int = 0
    skipped: int = 0
    chunks: int = 0
    tokens: int = 0
    read_s: float = 0.0
    parse_s: float = 0.0
    chunk_s: float = 0.0


def run(vault: Path, counter: TokenCounter, max_tokens: int) -> Totals:
    totals = Totals()
    started = time.perf_counter()
    files = [(f.relative_to(vault).as_posix(), f.read_bytes()) for f in sorted(vault.rglob("*.md"))]
    totals.read_s = time.perf_counter() - started
    for path, data in files:
        t0 = time.perf_counter()
        try:
            note = parse_note(path, data)
        except NoteError:
            totals.skipped += 1
            totals.parse_s += time.perf_counter() - t0
            continue
        t1 = time.perf_counter()
        chunks = chunk_note(note, counter, max_tokens)
        t2 = time.perf_counter()
        totals.parse_s += t1 - t0
        totals.chunk_s += t2 - t1
        totals.notes += 1
        totals.chunks += len(chunks)
        totals.tokens += sum(c.tokens for c in chunks)
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("vault", nargs="?", type=Path, default=DEFAULT_VAULT)
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    parser.add_argument("--repeat", type=int, default=1, help="runs; the fastest is reported")
    add_record_option(parser)
    args = parser.parse_args(argv)
    if not args.vault.is_dir():
        print(f"no such vault: {args.vault}", file=sys.stderr)
        return 2

    counter = TokenCounter.for_spec(default_spec())
    runs = [run(args.vault, counter, args.max_tokens) for _ in range(max(1, args.repeat))]
    best = min(runs, key=lambda t: t.parse_s + t.chunk_s)
    seconds = best.parse_s + best.chunk_s
    print(f"vault       {args.vault}")
    print(f"python      {platform.python_version()} on {platform.machine()}")
    print(f"max_tokens  {args.max_tokens}")
    print(f"notes       {best.notes} ({best.skipped} skipped)")
    print(f"chunks      {best.chunks}")
    print(f"tokens      {best.tokens}")
    print(f"read        {best.read_s:.2f} s (not included below)")
    print(f"parse       {best.parse_s:.2f} s")
    print(f"chunk       {best.chunk_s:.2f} s")
    print(f"seconds     {seconds:.2f}")
    print(f"notes/s     {best.notes / seconds:.0f}" if seconds else "notes/s     -")
    columns = ["notes", "skipped", "chunks", "tokens embedded", "parse", "chunk", "total"]
    row = [f"{n:,}" for n in (best.notes, best.skipped, best.chunks, best.tokens)]
    row += [f"{s:.1f} s" for s in (best.parse_s, best.chunk_s, seconds)]
    row.append(f"{best.notes / seconds:,.0f}" if seconds else "-")
    record(args.record, [*columns, "notes/s"], [row], align=["right"] * 8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
