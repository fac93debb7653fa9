"""The share of a first index that reading PDFs and OCR take, on the test vault.

The issue asks that extraction and OCR take a minority of the first index. The vault is the one
of tests/test_attachments_vault.py (obsidian-help's import notes with the two Roam screenshots,
four PDF manuals, the JSON Canvas sample, pathspec's sources under a `code` glob, `ocr = true`).
One first index (`Indexer.reconcile`, in this process: fewer notes than a parser pool is worth)
is timed whole, and every call of an extraction worker apart: its wall time, and the worker's
CPU time (`vaultd.isolation.children_cpu`, read after each file). The index's CPU is this
process's own plus its workers'.

With `--whole` the vault is issue 39's acceptance vault instead: all of obsidian-help/en with
every screenshot of `../shared/corpora/attachments/images`, all ten PDFs, the canvas and the same
sources.

Usage:

    python -m bench.speed.attachment_share [--whole] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pathspec as installed

from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from vaultd import isolation
from vaultd.config import load_config
from vaultd.index import extract
from vaultd.index.open import open_index
from vaultd.index.passes import Pacing

FOLDERS = ("Import notes",)
SCREENSHOTS = ("Roam-exporting.png", "Roam-Importer-importing.png")
PDFS = ("CAD.pdf", "asyRefCard.pdf", "TeXShopAndAsymptote.pdf", "pixel.pdf")


def build(vault: Path, whole: bool) -> None:
    help_en, attachments = CORPORA / "obsidian-help" / "en", CORPORA / "attachments"
    if whole:
        shutil.copytree(help_en, vault)
    else:
        vault.mkdir(parents=True)
        shutil.copy(help_en / "Home.md", vault / "Home.md")
        for folder in FOLDERS:
            shutil.copytree(help_en / folder, vault / folder)
    images = (
        sorted((attachments / "images").iterdir())
        if whole
        else [attachments / "images" / name for name in SCREENSHOTS]
    )
    pdfs = (
        sorted((attachments / "pdf").iterdir())
        if whole
        else [attachments / "pdf" / name for name in PDFS]
    )
    (vault / "Attachments").mkdir(exist_ok=True)
    for image in images:
        shutil.copy(image, vault / "Attachments" / image.name)
    (vault / "Manuals").mkdir(exist_ok=True)
    for pdf in pdfs:
        shutil.copy(pdf, vault / "Manuals" / pdf.name)
    shutil.copy(attachments / "canvas" / "jsoncanvas-sample.canvas", vault / "Sample.canvas")
    package = Path(installed.__file__).parent
    shutil.copytree(package, vault / "code" / "pathspec", ignore=shutil.ignore_patterns("*.pyc"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--whole", action="store_true", help="issue 39's whole acceptance vault")
    add_record_option(parser)
    args = parser.parse_args()
    spent: dict[str, dict[str, float]] = {}
    real = isolation.run_child

    def timed(module: str, path: str, data: bytes, **limits: Any) -> dict[str, Any]:
        kind = "ocr" if module == extract.OCR_CHILD else "pdf"
        wall, cpu = time.monotonic(), isolation.children_cpu()
        try:
            return real(module, path, data, **limits)
        finally:
            entry = spent.setdefault(kind, {"files": 0, "wall_s": 0.0, "cpu_s": 0.0})
            entry["files"] += 1
            entry["wall_s"] += time.monotonic() - wall
            entry["cpu_s"] += isolation.children_cpu() - cpu

    extract.run_child = timed  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        build(root / "vault", args.whole)
        config_file = root / "c.toml"
        config_file.write_text(
            f'[vault]\npath = "{root / "vault"}"\n[store]\npath = "{root / "data"}"\n'
            '[log]\nlevel = "error"\n[attachments]\nocr = true\ncode = ["code/**/*.py"]\n',
            encoding="utf-8",
        )
        config = load_config(config_file, env={})
        start_times, start = os.times(), time.monotonic()
        # Parsed in this process, so that every call of an extraction worker passes through
        # `timed`: a parser pool's processes would call the workers out of its sight. The
        # workers and the work are the same; only where the parsing runs differs.
        in_process = Pacing(pool_above=1 << 30)
        with open_index(config, env={}, pacing=in_process) as index:
            summary = index.indexer.reconcile()
            wall = time.monotonic() - start
            ended = os.times()
            own = (ended.user - start_times.user) + (ended.system - start_times.system)
            cpu = own + isolation.children_cpu()
            kinds = index.manifest.notes.kind_counts()
        isolation.close_children()
    out: dict[str, Any] = {
        "load_average": os.getloadavg(),
        "first_index_wall_s": round(wall, 1),
        "first_index_cpu_s": round(cpu, 1),
        "chunks_embedded": getattr(summary, "chunks_embedded", None),
        "kinds": kinds,
    }
    # The measure: extraction and OCR together against the whole first index.
    if spent:
        spent["together"] = {
            key: sum(entry[key] for entry in list(spent.values()))
            for key in ("files", "wall_s", "cpu_s")
        }
    for kind, entry in spent.items():
        out[kind] = {
            "files": entry["files"],
            "wall_s": round(entry["wall_s"], 1),
            "cpu_s": round(entry["cpu_s"], 1),
            "wall_share": round(entry["wall_s"] / wall, 3),
            "cpu_share": round(entry["cpu_s"] / cpu, 3),
        }
    print(json.dumps(out, indent=None if args.json else 2))
    files = sum(sum(statuses.values()) for statuses in kinds.values())
    rows = [["first index, all of it", f"{files:,}", f"{wall:.1f}", "1", f"{cpu:.1f}", "1"]]
    parts = (("ocr", "OCR"), ("pdf", "PDF text layers"), ("together", "extraction and OCR"))
    for kind, name in parts:
        if kind in out:
            part = out[kind]
            figures = (part["wall_s"], part["wall_share"], part["cpu_s"], part["cpu_share"])
            rows.append([name, f"{part['files']:,}", *(f"{x:g}" for x in figures)])
    columns = ["part", "files", "wall s", "share of wall", "CPU s", "share of CPU"]
    record(args.record, columns, rows)


if __name__ == "__main__":
    main()
