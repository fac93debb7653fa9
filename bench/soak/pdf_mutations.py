"""Hostile PDFs: many mutations of a real one, each read as the indexer reads it.

Each mutation overwrites, inserts or cuts a few bytes of a real PDF (seeded, so a run can be
repeated) and goes through `vaultd.index.extract.extract_note` with the default limits: in a
child process with its time and memory limits. Every outcome must be a note or a LeftOutError
with a reason; anything else (an exception of another kind, this process harmed) fails the
run. Prints the outcomes by kind, the slowest file and this process's peak RSS.

    .venv/bin/python -m bench.soak.pdf_mutations [PDF] [--count 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import collections
import random
import resource
import time
from pathlib import Path

from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from harness import mutations
from vaultd.errors import LeftOutError
from vaultd.index.extract import Extraction, extract_note

DEFAULT = CORPORA / "attachments" / "pdf" / "asyRefCard.pdf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("pdf", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    add_record_option(parser)
    args = parser.parse_args()
    data = args.pdf.read_bytes()
    rng = random.Random(args.seed)
    outcomes: collections.Counter[str] = collections.Counter()
    slowest = (0.0, -1)
    started = time.perf_counter()
    for n in range(args.count):
        mutated = mutations.mutated(data, rng)
        began = time.perf_counter()
        try:
            note = extract_note(f"m{n}.pdf", mutated, extraction=Extraction())
        except LeftOutError as exc:
            assert exc.reason, n
            outcomes[f"left out: {exc.kind}"] += 1
        else:
            outcomes["read" if note.blocks else "read, no passages"] += 1
        slowest = max(slowest, (time.perf_counter() - began, n))
    total = time.perf_counter() - started
    for outcome, count in sorted(outcomes.items()):
        print(f"{count:5d}  {outcome}")
    rows = [[outcome, f"{count:,}"] for outcome, count in sorted(outcomes.items())]
    record(args.record, [f"{args.count} mutations of {args.pdf.name}", "files"], rows)
    print(
        f"{args.count} mutations of {args.pdf.name} in {total:.1f} s; slowest #{slowest[1]}: "
        f"{slowest[0]:.2f} s; this process's peak RSS "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, the children's "
        f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB"
    )


if __name__ == "__main__":
    main()
