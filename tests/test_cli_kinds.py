"""The CLI's text says what a person needs of each kind of file (issue 52): a hit is located
as its kind is read (a PDF's page, a canvas's card, source code's symbol, a note's lines) and
says what put it above the hits below when a known-item tier did, not a score that goes up the
list. Against a real daemon, with the real `vaultd` command, over a vault of a shared PDF, the
shared JSON Canvas sample, a Python module and a note.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.daemon import PATIENCE, RunningDaemon, running
from tests.conftest import shared_path
from vaultd.pipeline import pdf

pytestmark = pytest.mark.slow

#: The PDF and the page whose longest line is searched for.
PDF, PAGE = "CAD.pdf", 4
#: The sample canvas's card "Learn more: Apps, Spec, Github" and its id.
CARD, NODE = "Learn more: Apps, Spec, Github", "59e896bc8da20699"
#: A Python module of this checkout, and the function whose docstring is searched for.
MODULE, FUNCTION = Path(__file__).parent.parent / "vaultd" / "vaultpath.py", "vault_path"
NOTE = (
    "# Tides\n\nThe moon pulls the sea.\n\nSpring tides come twice a month at full and new moon.\n"
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    attachments = shared_path("corpora", "attachments")
    root = tmp_path_factory.mktemp("kinds")
    vault = root / "vault"
    (vault / "Manuals").mkdir(parents=True)
    shutil.copy(attachments / "pdf" / PDF, vault / "Manuals" / PDF)
    shutil.copy(attachments / "canvas" / "jsoncanvas-sample.canvas", vault / "Sample.canvas")
    (vault / "code").mkdir()
    shutil.copy(MODULE, vault / "code" / MODULE.name)
    (vault / "Tides.md").write_text(NOTE, encoding="utf-8")
    with running(vault, root, extra='[attachments]\ncode = ["code/**/*.py"]\n') as d:
        yield d


def vaultd(daemon: RunningDaemon, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", *args, "--config", str(daemon.config)],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        env={**os.environ, "NO_COLOR": "1"},
        check=True,
    )
    return done.stdout


def first_hit(daemon: RunningDaemon, query: str) -> str:
    """The first hit's heading line of `vaultd search` as printed."""
    return vaultd(daemon, "search", query, "-k", "3").splitlines()[0]


def test_a_pdf_hit_is_located_by_its_page(daemon: RunningDaemon) -> None:
    pages = pdf.read(shared_path("corpora", "attachments", "pdf", PDF).read_bytes())["pages"]
    sentence = max(pages[PAGE - 1].split("\n"), key=lambda line: len(line.split()))
    line = first_hit(daemon, sentence)
    assert line.startswith(f"1. Manuals/{PDF}, p"), line
    hit = daemon.search(sentence, k=1)[0]
    first, last = hit["page"], hit["page_end"]
    assert first <= PAGE <= last
    shown = f"p. {first}" if first == last else f"pp. {first}–{last}"
    assert line.startswith(f"1. Manuals/{PDF}, {shown}  "), line
    assert f":{hit['start_line']}-" not in line


def test_a_canvas_hit_is_located_by_its_card(daemon: RunningDaemon) -> None:
    line = first_hit(daemon, CARD)
    assert line.startswith(f"1. Sample.canvas, card {NODE}  "), line


def test_a_code_hit_is_located_by_its_symbol(daemon: RunningDaemon) -> None:
    function = next(
        node
        for node in ast.walk(ast.parse(MODULE.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION
    )
    docstring = " ".join((ast.get_docstring(function) or "").split("\n\n")[0].split())
    line = first_hit(daemon, docstring)
    assert line.startswith(f"1. code/{MODULE.name}, def {FUNCTION}  "), line


def test_a_note_hit_is_located_by_its_lines(daemon: RunningDaemon) -> None:
    query = "spring tides at full and new moon"
    hit = daemon.search(query, k=1)[0]
    line = first_hit(daemon, query)
    assert line.startswith(f"1. Tides.md:{hit['start_line']}-{hit['end_line']}  "), line


def test_a_tier_that_placed_a_hit_is_named_instead_of_its_score(daemon: RunningDaemon) -> None:
    """`"..."` quoted: the passages holding the phrase rank first whatever their score, so
    each says why it is there; the hits the score orders show their score."""
    printed = vaultd(daemon, "search", '"spring tides"', "-k", "5", "--mode", "hybrid")
    heads = [line for line in printed.splitlines() if line[:1].isdigit()]
    assert heads[0].startswith("1. Tides.md") and heads[0].endswith("[exact phrase]"), heads
    hits = daemon.search('"spring tides"', k=5, explain=True)
    for head, hit in zip(heads, hits, strict=True):
        tier = hit["explain"].get("known")
        assert hit.get("ranked_by") == (tier["tier"] if tier else None)
        if tier is None:
            assert head.endswith(f"({hit['score']:.4f})"), head


def test_status_counts_the_files_by_kind(daemon: RunningDaemon) -> None:
    """Not "notes: 4" for a PDF, a canvas, a code file and a note."""
    report = json.loads(vaultd(daemon, "status", "--json"))
    assert report["by_kind"] == {"canvas": 1, "code": 1, "note": 1, "pdf": 1}
    assert sum(report["by_kind"].values()) == report["notes"]
    printed = vaultd(daemon, "status")
    assert "indexed:  1 note, 1 PDF, 1 code file, 1 canvas (4 files" in printed, printed
    assert "notes:" not in printed
