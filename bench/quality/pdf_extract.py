"""Which library reads a PDF's text layer for vaultd: quality and speed against pdftotext.

Each library reads every page of each PDF in the folder (default: the shared corpus's
`attachments/pdf/`), in one run, one after another per file, so the machine's load at the
time weighs on all alike; the figures to compare are the ratios within the run. Quality is
measured against poppler's `pdftotext` (the reference; its text is what most tools show):
the share of its words (as a multiset, per page) a library finds (recall), and of the
library's words that pdftotext also has (precision). Speed is wall time per page, each
library run in this process with the file already in memory; pdftotext is run as the
command it is (`pdftotext -enc UTF-8 FILE -`), so its time includes a process start (measured
separately and subtracted: `pdftotext -v`).

    .venv/bin/python -m bench.quality.pdf_extract [FOLDER] [--repeat N] [--json OUT] [--only LIB...]

pypdf and pdfminer.six are optional (install those two distributions beside vaultd to compare them);
pypdfium2 is vaultd's dependency. "vaultd-worker" is the indexer's own path: pypdfium2 in a
child process per file (`vaultd.isolation`), its start included, a no-text PDF scored empty.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record

DEFAULT = CORPORA / "attachments" / "pdf"
_WORD = re.compile(r"\w+")


def words(text: str) -> Counter[str]:
    return Counter(w.lower() for w in _WORD.findall(text))


def pdftotext(data: bytes, path: Path) -> list[str]:
    out = subprocess.run(
        ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, check=True
    ).stdout.decode("utf-8", "replace")
    pages = out.split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def pypdfium2(data: bytes, path: Path) -> list[str]:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    pages = []
    for index in range(len(document)):
        page = document[index]
        textpage = page.get_textpage()
        pages.append(textpage.get_text_range())
        textpage.close()
        page.close()
    document.close()
    return pages


def pypdf(data: bytes, path: Path) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages]


def pdfminer(data: bytes, path: Path) -> list[str]:
    from pdfminer.high_level import extract_text

    text: str = extract_text(io.BytesIO(data))
    pages = text.split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def vaultd_worker(data: bytes, path: Path) -> list[str]:
    """What the indexer does: pypdfium2 in a child process with its limits, one per file."""
    from vaultd.isolation import run_child

    found = run_child("vaultd.pipeline.pdf", path.name, data, timeout=60, memory_mb=1024)
    pages: list[str] = found["pages"]
    return pages


LIBRARIES: dict[str, Callable[[bytes, Path], list[str]]] = {
    "pdftotext": pdftotext,
    "pypdfium2": pypdfium2,
    "vaultd-worker": vaultd_worker,
    "pypdf": pypdf,
    "pdfminer.six": pdfminer,
}


def available(name: str) -> bool:
    module = {"pypdfium2": "pypdfium2", "pypdf": "pypdf", "pdfminer.six": "pdfminer"}.get(name)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def process_start() -> float:
    """The time to start and end `pdftotext` doing nothing, subtracted from its runs."""
    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run(["pdftotext", "-v"], capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def score(reference: list[str], pages: list[str]) -> tuple[float, float]:
    found = expected = matched = 0
    for number, ref in enumerate(reference):
        want = words(ref)
        got = words(pages[number]) if number < len(pages) else Counter()
        matched += sum((want & got).values())
        expected += sum(want.values())
        found += sum(got.values())
    return matched / max(expected, 1), matched / max(found, 1)


@dataclass
class Totals:
    """One library's sums over every file: time, pages, and each file's recall and precision."""

    seconds: float = 0.0
    pages: int = 0
    recall: list[float] = field(default_factory=list)
    precision: list[float] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=1, help="runs per file (best counts)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--only", nargs="*", help="these libraries only (pdftotext always)")
    add_record_option(parser)
    args = parser.parse_args()
    names = [n for n in LIBRARIES if available(n)]
    if args.only:
        names = [n for n in names if n == "pdftotext" or n in args.only]
    start_cost = process_start()
    totals = {n: Totals() for n in names}
    rows = []
    for path in sorted(args.folder.glob("*.pdf")):
        data = path.read_bytes()
        reference = pdftotext(data, path)
        row: dict[str, object] = {"file": path.name, "pages": len(reference)}
        for name in names:
            best = float("inf")
            pages: list[str] = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                try:
                    pages = LIBRARIES[name](data, path)
                except Exception as exc:  # a library that fails on a file: say so
                    print(f"{name} failed on {path.name}: {exc}", file=sys.stderr)
                    pages = []
                spent = time.perf_counter() - started
                if name == "pdftotext":
                    spent = max(spent - start_cost, 0.0)
                best = min(best, spent)
            recall, precision = score(reference, pages)
            totals[name].seconds += best
            totals[name].pages += len(reference)
            if sum(len(p.strip()) for p in reference):
                totals[name].recall.append(recall)
                totals[name].precision.append(precision)
            row[name] = {"ms": round(best * 1000, 1), "recall": round(recall, 3)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\npdftotext process start: {start_cost * 1000:.1f} ms (subtracted)")
    print(f"{'library':14} {'ms/page':>8} {'vs pdftotext':>12} {'recall':>7} {'precision':>9}")
    base = totals["pdftotext"].seconds / max(totals["pdftotext"].pages, 1)
    summary = {}
    for name in names:
        t = totals[name]
        per_page = t.seconds / max(t.pages, 1)
        recall = statistics.mean(t.recall) if t.recall else 0.0
        precision = statistics.mean(t.precision) if t.precision else 0.0
        summary[name] = {
            "ms_per_page": round(per_page * 1000, 3),
            "speed_vs_pdftotext": round(base / per_page, 2) if per_page else None,
            "recall": round(recall, 3),
            "precision": round(precision, 3),
        }
        print(
            f"{name:14} {per_page * 1000:8.2f} {base / per_page if per_page else 0:11.2f}x "
            f"{recall:7.3f} {precision:9.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps({"files": rows, "summary": summary}, indent=2))
    record(
        args.record,
        ["library", "ms per page", "speed against pdftotext", "recall", "precision"],
        [
            [
                name,
                f"{s['ms_per_page']:.1f}",
                f"{s['speed_vs_pdftotext'] or 0:.2f}x",
                f"{s['recall']:.3f}",
                f"{s['precision']:.3f}",
            ]
            for name, s in summary.items()
        ],
    )
    if args.record:
        by_file = [
            [str(row["file"]), str(row["pages"])]
            + [f"{cast(dict[str, float], row[name])['ms']:.0f}" for name in names]
            for row in rows
        ]
        record(f"{args.record}-files", ["file", "pages", *names], by_file)


if __name__ == "__main__":
    main()
