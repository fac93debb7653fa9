"""`vaultd inspect`: the real CLI over real notes, as a user or a script would run it."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.conftest import shared_path
from vaultd.cli.commands import main
from vaultd.embedding.tokens import TokenCounter
from vaultd.pipeline.chunk import context_line

REPORT_KEYS = {
    "path",
    "kind",
    "title",
    "aliases",
    "tags",
    "frontmatter",
    "links",
    "errors",
    "chunks",
}
CHUNK_KEYS = {"id", "index", "section", "headings", "start_line", "end_line", "tokens", "text"}
LINK_KEYS = {"target", "heading", "block", "alias", "embed", "line"}

NOTE = """---
title: Fixture Note
aliases: [Fixture]
tags: [Demo, demo/nested]
up: "[[Parent]]"
---
# Fixture Note

Intro with #inline tag and [[Other Note#Part|shown]].

## Setup

Install it, then see ![[Diagram.png]] and [the guide](Guide%20Book.md#Start).

```bash
vaultd index --vault ~/Notes  # #not-a-tag
```
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str | None]:
    """No user configuration leaks in: config and data homes point into tmp_path."""
    return {
        "VAULTD_CONFIG": None,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "Folder").mkdir(parents=True)
    (root / "Folder" / "Fixture.md").write_text(NOTE, encoding="utf-8")
    return root


def invoke(args: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(main, args, env=env, catch_exceptions=False)


def inspect_json(args: list[str], env: dict[str, str | None]) -> dict[str, Any]:
    result = invoke(["inspect", "--json", *args], env)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert isinstance(report, dict)
    return report


def assert_report_shape(report: dict[str, Any], counter: TokenCounter, budget: int) -> None:
    assert set(report) == REPORT_KEYS
    for link in report["links"]:
        assert set(link) == LINK_KEYS
        assert isinstance(link["embed"], bool)
    assert [c["index"] for c in report["chunks"]] == list(range(len(report["chunks"])))
    for chunk in report["chunks"]:
        assert set(chunk) == CHUNK_KEYS
        assert 1 <= chunk["start_line"] <= chunk["end_line"]
        # `tokens` counts the embedded text, `title > section` prefix included.
        embedded = context_line(report["title"], chunk["headings"]) + "\n\n" + chunk["text"]
        assert counter.count(embedded, special=True) == chunk["tokens"] <= budget


def test_inspect_json_on_a_fixture_note(
    vault: Path, env: dict[str, str | None], counter: TokenCounter
) -> None:
    report = inspect_json([str(vault / "Folder" / "Fixture.md"), "--vault", str(vault)], env)
    assert_report_shape(report, counter, 256)
    assert report["path"] == "Folder/Fixture.md"
    assert report["title"] == "Fixture Note"
    assert report["aliases"] == ["Fixture"]
    assert report["tags"] == ["demo", "demo/nested", "inline"]
    assert report["frontmatter"]["up"] == "[[Parent]]"
    assert report["errors"] == []
    expected = [
        {"target": "Parent", "heading": None, "block": None, "alias": None, "embed": False},
        {
            "target": "Other Note",
            "heading": "Part",
            "block": None,
            "alias": "shown",
            "embed": False,
        },
        {"target": "Diagram.png", "heading": None, "block": None, "alias": None, "embed": True},
        {"target": "Guide Book", "heading": "Start", "block": None, "alias": None, "embed": False},
    ]
    # The file line each is written on; the front matter's belong to the whole note.
    lines = [None, 9, 13, 13]
    assert report["links"] == [
        {**link, "line": line} for link, line in zip(expected, lines, strict=True)
    ]
    assert [(c["section"], c["start_line"], c["end_line"]) for c in report["chunks"]] == [
        ("Fixture Note", 9, 9),
        ("Fixture Note > Setup", 13, 17),
    ]
    assert report["chunks"][1]["headings"] == ["Fixture Note", "Setup"]


def test_inspect_text_prints_a_summary(vault: Path, env: dict[str, str | None]) -> None:
    result = invoke(["inspect", str(vault / "Folder" / "Fixture.md"), "--vault", str(vault)], env)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "path:     Folder/Fixture.md" in out
    assert "title:    Fixture Note" in out
    assert "tags:     #demo, #demo/nested, #inline" in out
    assert "links:    4" in out
    assert "[[Other Note#Part]] (shown)" in out
    assert "chunks:   2 (" in out
    assert "lines 13-17" in out and "Fixture Note > Setup" in out


def test_inspect_outside_a_vault_uses_the_file_name(
    tmp_path: Path, env: dict[str, str | None]
) -> None:
    nfd = unicodedata.normalize("NFD", "Café.md")
    (tmp_path / nfd).write_text("Body.\n", encoding="utf-8")
    report = inspect_json([str(tmp_path / nfd)], env)
    assert report["path"] == "Café.md"
    assert report["title"] == "Café"


def test_inspect_honours_chunking_max_tokens_from_config(
    vault: Path, tmp_path: Path, env: dict[str, str | None], counter: TokenCounter
) -> None:
    long = vault / "Long.md"
    long.write_text("# Long\n\n" + "A sentence of words. " * 300 + "\n", encoding="utf-8")
    config = tmp_path / "vaultd.toml"
    config.write_text("[chunking]\nmax_tokens = 64\n", encoding="utf-8")
    report = inspect_json([str(long), "--config", str(config)], env)
    assert_report_shape(report, counter, 64)
    assert len(report["chunks"]) > 5


def test_inspect_a_skipped_note_says_why(tmp_path: Path, env: dict[str, str | None]) -> None:
    binary = tmp_path / "binary.md"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    report = inspect_json([str(binary)], env)
    assert report["skipped"] is True
    assert report["chunks"] == []
    assert "binary" in report["errors"][0]
    result = invoke(["inspect", str(binary)], env)
    assert result.exit_code == 0
    assert "skipped:" in result.stdout


def test_inspect_missing_file_is_a_usage_error(tmp_path: Path, env: dict[str, str | None]) -> None:
    result = invoke(["inspect", str(tmp_path / "nope.md")], env)
    assert result.exit_code == 2
    assert "does not exist" in result.output


def run_inspect(args: list[str], env: dict[str, str | None]) -> subprocess.CompletedProcess[str]:
    """`python -m vaultd inspect ARGS` in a child whose memory is capped (4 GiB of address
    space): a file read without limit fails it fast instead of taking the machine's memory,
    and one that blocks fails on the timeout instead of hanging the suite."""
    child_env = {k: v for k, v in os.environ.items() if k != "VAULTD_CONFIG"}
    child_env.update({k: v for k, v in env.items() if v is not None})

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [sys.executable, "-m", "vaultd", "inspect", *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=cap_memory,
    )


def test_inspect_refuses_a_fifo_without_waiting_on_it(
    tmp_path: Path, env: dict[str, str | None]
) -> None:
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)  # no writer ever opens it: a blocking read would wait forever
    done = run_inspect([str(fifo)], env)
    assert done.returncode == 2, done.stderr
    assert f"{fifo} is a FIFO (named pipe), not a regular file" in done.stderr
    assert done.stdout == ""


def test_inspect_refuses_a_link_to_an_endless_device(
    tmp_path: Path, env: dict[str, str | None]
) -> None:
    link = tmp_path / "zero.md"
    link.symlink_to("/dev/zero")
    done = run_inspect([str(link)], env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{link} (a link to /dev/zero) is a character device" in done.stderr


def test_inspect_never_reads_a_file_over_the_size_limit(
    tmp_path: Path, env: dict[str, str | None]
) -> None:
    huge = tmp_path / "huge.md"
    with huge.open("wb") as handle:
        handle.truncate(64 << 30)  # sparse: 64 GiB that take no disk, more than the memory cap
    done = run_inspect(["--json", str(huge)], env)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["skipped"] is True and report["chunks"] == []
    assert "65536.0 MiB is over the 8 MiB limit ([vault] max_file_mb)" in report["errors"][0]


@pytest.mark.corpus
def test_inspect_json_on_a_corpus_note(env: dict[str, str | None], counter: TokenCounter) -> None:
    vault = shared_path("corpora", "obsidian-help", "en")
    report = inspect_json([str(vault / "Home.md"), "--vault", str(vault)], env)
    assert_report_shape(report, counter, 256)
    assert report["path"] == "Home.md"
    assert report["title"] == "Obsidian Help"
    assert report["aliases"] == ["Start here"]
    assert len(report["links"]) > 10
    assert report["chunks"]


@pytest.mark.corpus
def test_inspect_text_on_a_non_ascii_corpus_note(env: dict[str, str | None]) -> None:
    root = shared_path("corpora", "obsidian-help", "zh")
    note = next(p for p in sorted(root.rglob("*.md")) if not p.name.isascii())
    result = invoke(["inspect", str(note), "--vault", str(root)], env)
    assert result.exit_code == 0, result.output
    assert f"path:     {unicodedata.normalize('NFC', note.relative_to(root).as_posix())}" in (
        result.stdout
    )
    assert "chunks:" in result.stdout


def test_inspect_via_python_m_vaultd(
    vault: Path, env: dict[str, str | None], counter: TokenCounter
) -> None:
    child_env = {k: v for k, v in os.environ.items() if k != "VAULTD_CONFIG"}
    child_env.update({k: v for k, v in env.items() if v is not None})
    args = ["inspect", "--json", "Folder/Fixture.md", "--vault", str(vault)]
    done = subprocess.run(
        [sys.executable, "-m", "vaultd", *args],
        cwd=vault,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert_report_shape(report, counter, 256)
    assert report["path"] == "Folder/Fixture.md"


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["inspect", "--help"]])
def test_help_works(args: list[str], env: dict[str, str | None]) -> None:
    result = invoke(args, env)
    assert result.exit_code == 0
    assert "Usage:" in result.stdout
    assert "inspect" in result.stdout
    if args[0] == "inspect":
        assert "--json" in result.stdout and "--config" in result.stdout


def test_inspect_shows_what_would_be_indexed_for_every_kind(
    tmp_path: Path, env: dict[str, str | None]
) -> None:
    """Real files of each kind: a canvas's cards, a PDF's pages, a screenshot's words (with
    `ocr = true`), a source file's symbols and a drawing's text elements, never its data."""
    import pathspec

    from tests.test_attachments import DRAWING_DATA, EXCALIDRAW_MD

    attachments = shared_path("corpora", "attachments")
    vault = tmp_path / "vault"
    vault.mkdir()
    copies = {
        "Sample.canvas": attachments / "canvas" / "jsoncanvas-sample.canvas",
        "CAD.pdf": attachments / "pdf" / "CAD.pdf",
        "Roam-exporting.png": attachments / "images" / "Roam-exporting.png",
        "util.py": Path(pathspec.__file__).parent / "util.py",
    }
    for name, source in copies.items():
        (vault / name).write_bytes(source.read_bytes())
    (vault / "sketch.excalidraw.md").write_text(EXCALIDRAW_MD, encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[attachments]\nocr = true\ncode = ["*.py"]\n',
        encoding="utf-8",
    )

    def report(name: str) -> dict[str, Any]:
        found = inspect_json([str(vault / name), "--config", str(config)], env)
        assert not found.get("skipped") and found["chunks"], found
        return found

    canvas = report("Sample.canvas")
    assert canvas["kind"] == "canvas"
    card = next(c for c in canvas["chunks"] if c.get("node") == "59e896bc8da20699")
    assert card["text"].startswith("Learn more:")
    pdf = report("CAD.pdf")
    assert pdf["kind"] == "pdf" and all(c["page"] >= 1 for c in pdf["chunks"])
    assert {c["page"] for c in pdf["chunks"]} >= {1, 4}
    image = report("Roam-exporting.png")
    assert image["kind"] == "image"
    assert any("Find or Create Page" in c["text"] for c in image["chunks"])
    code = report("util.py")
    assert code["kind"] == "code" and "def normalize_file" in {
        c.get("symbol") for c in code["chunks"]
    }
    drawing = report("sketch.excalidraw.md")
    assert drawing["kind"] == "excalidraw" and drawing["title"] == "sketch"
    assert [c["node"] for c in drawing["chunks"]] == ["quokka01", "lens0002"]
    assert not any(DRAWING_DATA[:20] in c["text"] for c in drawing["chunks"])

    text = invoke(["inspect", str(vault / "CAD.pdf"), "--config", str(config)], env)
    assert text.exit_code == 0 and "kind:     pdf" in text.stdout and " · page 4" in text.stdout
