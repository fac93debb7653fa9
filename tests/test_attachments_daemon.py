"""The daemon and PDFs for real: kill -9 while a PDF is being read, or an image by OCR,
converges, the reader dies with it, and bad PDFs are left out with the daemon up."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from harness.convergence import assert_converged
from harness.daemon import running, start, wait_until
from tests.conftest import shared_path
from tests.pipeline.test_ocr import png_bomb
from tests.test_attachments import make_pdf
from vaultd.index.extract import OCR_CHILD, PDF_CHILD


def pdf_readers(parent: int, module: str = PDF_CHILD) -> list[int]:
    """The PDF-reading children (or those running `module`) of process `parent` now."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                command = fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and module.encode() in command:
            found.append(int(entry))
    return found


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


def assert_pages_read_everywhere(daemon: Any, hit: dict[str, Any]) -> None:
    """A hit's pages read back over HTTP, by the CLI and by the MCP tool read_note."""
    from click.testing import CliRunner

    from vaultd.api.client import Client
    from vaultd.cli.commands import main
    from vaultd.cli.common import DaemonOrIndex
    from vaultd.cli.mcp_bridge import TOOLS, Bridge

    page, path = hit["page"], hit["path"]
    asked = f"/v1/notes/{path}?text=1&start_page={page}&end_page={hit['page_end']}"
    answer = daemon.request("GET", asked)
    assert (answer["start_page"], answer["end_page"], answer["total_pages"]) == (page, page, 2)
    assert f"page {page}:" in answer["text"] and answer["text"].count("page") == 1
    args = ["note", path, "--text", "--start-page", str(page), "--json"]
    ran = CliRunner().invoke(main, [*args, "--config", str(daemon.config)])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["text"] == answer["text"]
    bridge = Bridge(DaemonOrIndex(lambda: Client(daemon.socket, timeout=30), None, "start it"))
    search = next(tool for tool in TOOLS if tool.name == "search")
    found = bridge.run(search, {"query": "heron count rose by 32", "k": 1})["hits"][0]
    assert {k: found[k] for k in ("path", "kind", "page", "page_end")} == {
        "path": path,
        "kind": "pdf",
        "page": page,
        "page_end": page,
    }
    assert "node" not in found and "symbol" not in found
    read_note = next(tool for tool in TOOLS if tool.name == "read_note")
    read = bridge.run(read_note, {"path": path, "start_page": page, "end_page": page})
    assert read == {
        "path": path,
        "title": Path(path).stem,
        "start_page": page,
        "end_page": page,
        "total_pages": 2,
        "text": answer["text"],
    }


def test_kill_9_while_a_pdf_is_read_converges_and_bad_pdfs_leave_the_daemon_up(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for n in range(6):
        pages = [f"Report {n} page {p}: the heron count rose by {n * 10 + p}" for p in (1, 2)]
        (vault / f"report{n}.pdf").write_bytes(make_pdf(pages))
    (vault / "fake.pdf").write_text("no PDF at all\n")
    (vault / "note.md").write_text("# Note\n\nSee ![[report1.pdf#page=2]].\n")

    with running(vault, tmp_path, wait_ready=False) as daemon:
        readers: list[int] = []

        def reading() -> bool:
            readers[:] = pdf_readers(daemon.process.pid)
            return bool(readers) or daemon.process.poll() is not None

        wait_until(reading, "the daemon reads a PDF in its child process")
        assert readers, daemon.log_text()
        daemon.process.send_signal(signal.SIGKILL)
        assert daemon.process.wait(60) == -signal.SIGKILL
        # The reader does not outlive the daemon (PR_SET_PDEATHSIG).
        wait_until(lambda: all(gone(pid) for pid in readers), "the PDF reader is gone")

    again = start(daemon.config, daemon.socket, daemon.log)
    try:
        again.wait_idle()
        status = again.request("GET", "/v1/status")
        assert status["status"] == "ok"
        left = {e["path"]: e["kind"] for e in status["left_out"]}
        assert left == {"fake.pdf": "damaged"}
        assert status["kinds"]["pdf"] == {"ok": 6, "left_out": 1}
        hit = again.search("heron count rose by 32", k=1)[0]
        assert hit["path"] == "report3.pdf"
        assert [h["path"] for h in again.search("heron count", kinds=["note"])] == ["note.md"]
        assert again.search("heron count rose by 32", k=1, kinds=["pdf"])[0] == hit
        assert_pages_read_everywhere(again, hit)
    finally:
        assert_converged(again, vault, tmp_path)


def assert_text_read_everywhere(daemon: Any, hit: dict[str, Any]) -> None:
    """A hit's lines of a file read by extraction (a screenshot) read back over HTTP, by the
    CLI and by the MCP tool read_note: the text indexed from it, never the file's bytes."""
    from urllib.parse import quote

    from click.testing import CliRunner

    from vaultd.api.client import Client
    from vaultd.cli.commands import main
    from vaultd.cli.common import DaemonOrIndex
    from vaultd.cli.mcp_bridge import TOOLS, Bridge

    path, lines = hit["path"], {"start_line": hit["start_line"], "end_line": hit["end_line"]}
    asked = f"/v1/notes/{quote(path)}?text=1&start_line={lines['start_line']}"
    answer = daemon.request("GET", f"{asked}&end_line={lines['end_line']}")
    assert answer["text"] == hit["text"] and answer["blocks"], answer
    args = ["note", path, "--text", "--start-line", str(lines["start_line"]), "--json"]
    ran = CliRunner().invoke(
        main, [*args, "--end-line", str(lines["end_line"]), "--config", str(daemon.config)]
    )
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["text"] == answer["text"]
    bridge = Bridge(DaemonOrIndex(lambda: Client(daemon.socket, timeout=30), None, "start it"))
    read_note = next(tool for tool in TOOLS if tool.name == "read_note")
    read = bridge.run(read_note, {"path": path, **lines})
    assert (read["text"], read["blocks"]) == (answer["text"], answer["blocks"])


#: Real screenshots of obsidian-help, and a phrase OCR reads in the first.
SCREENSHOTS = ("Roam-exporting.png", "internal-links-header.png")
# The test is about convergence after kill -9, not the extraction time limit: a busy machine
# (CI runs tests side by side) can take the worker past the default 60 s on one screenshot.
OCR_ON = '\n[attachments]\nocr = true\nextract_timeout = "10m"\n'


def test_kill_9_while_an_image_is_read_by_ocr_converges(tmp_path: Path) -> None:
    images = shared_path("corpora", "attachments", "images")
    vault = tmp_path / "vault"
    (vault / "Attachments").mkdir(parents=True)
    for name in SCREENSHOTS:
        (vault / "Attachments" / name).write_bytes((images / name).read_bytes())
    (vault / "note.md").write_text("# Roam\n\n![[Roam-exporting.png]]\n")

    with running(vault, tmp_path, wait_ready=False, extra=OCR_ON) as daemon:
        readers: list[int] = []

        def reading() -> bool:
            readers[:] = pdf_readers(daemon.process.pid, OCR_CHILD)
            return bool(readers) or daemon.process.poll() is not None

        wait_until(reading, "the daemon reads an image in its OCR worker")
        assert readers, daemon.log_text()
        daemon.process.send_signal(signal.SIGKILL)
        assert daemon.process.wait(60) == -signal.SIGKILL
        # The OCR worker does not outlive the daemon (PR_SET_PDEATHSIG).
        wait_until(lambda: all(gone(pid) for pid in readers), "the OCR worker is gone")

    again = start(daemon.config, daemon.socket, daemon.log)
    try:
        again.wait_idle()
        status = again.request("GET", "/v1/status")
        assert status["status"] == "ok"
        assert status["kinds"]["image"] == {"ok": len(SCREENSHOTS)}
        hit = again.search("Find or Create Page", k=1, kinds=["image"])[0]
        assert hit["path"] == "Attachments/Roam-exporting.png"
        assert_text_read_everywhere(again, hit)
    finally:
        assert_converged(again, vault, tmp_path, extra=OCR_ON)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        line = next(li for li in handle if li.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def unit_memory_high_mb() -> float:
    """The shipped systemd unit's MemoryHigh, in MB."""
    unit = (Path(__file__).parents[1] / "vaultd" / "resources" / "vaultd.service").read_text()
    value = next(li for li in unit.splitlines() if li.startswith("MemoryHigh="))[11:]
    return float(value[:-1]) * {"M": 1, "G": 1024}[value[-1]]


def big_pdf(path: Path, at_least: int = 100 * 1024 * 1024) -> int:
    """A PDF of real pages (asymptote's manual imported again and again) of `at_least` bytes."""
    import pypdfium2 as pdfium

    source = pdfium.PdfDocument(shared_path("corpora", "attachments", "pdf", "asymptote.pdf"))
    size = path.stat().st_size if path.exists() else 0
    copies = 1 + at_least // max(1, len(source) * 9000)  # about 9 kB a page once imported
    while size < at_least:
        out = pdfium.PdfDocument.new()
        for _ in range(copies):
            out.import_pages(source)
        out.save(str(path))
        pages = len(out)
        out.close()
        size = path.stat().st_size
        copies = int(copies * at_least / size) + 1
    source.close()
    return pages


def test_a_100_mb_pdf_is_left_out_with_its_reason_within_the_units_memory(
    tmp_path: Path,
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    pages = big_pdf(vault / "huge.pdf")
    assert (vault / "huge.pdf").stat().st_size >= 100 * 1024 * 1024 and pages > 10_000
    (vault / "note.md").write_text("# Note\n\nThe heron count rose again.\n")
    # And the other bad input beside it: the daemon serves on, each left out with its reason.
    card = shared_path("corpora", "attachments", "pdf", "asyRefCard.pdf").read_bytes()
    bad = vault / "bad"
    bad.mkdir()
    (bad / "truncated.pdf").write_bytes(card[: len(card) // 2])
    (bad / "encrypted.pdf").write_bytes(make_pdf(["A secret page"], encrypt=True))
    (bad / "fake.pdf").write_text("This is a note someone named .pdf\n")
    (bad / "broken.canvas").write_text('{"nodes": [{"id": "a", "type": "text", "text": ')
    (bad / "bomb.png").write_bytes(png_bomb(20_000, 20_000))
    # The size cap raised over it, so the daemon reads it: hashed, piped to the worker, and
    # the worker stopped at the time limit (thousands of pages are more than 2 s of work).
    extra = '\n[attachments]\nmax_pdf_mb = 128\nextract_timeout = "2s"\nocr = true\n'
    with running(vault, tmp_path, extra=extra) as daemon:
        status = daemon.request("GET", "/v1/status")
        assert status["status"] == "ok"
        left = {e["path"]: e for e in status["left_out"]}
        assert {p: e["kind"] for p, e in left.items()} == {
            "huge.pdf": "too_costly",
            "bad/truncated.pdf": "damaged",
            "bad/encrypted.pdf": "encrypted",
            "bad/fake.pdf": "damaged",
            "bad/broken.canvas": "damaged",
            "bad/bomb.png": "too_big",
        }, left
        assert "extract_timeout" in left["huge.pdf"]["reason"]
        assert left["bad/fake.pdf"]["reason"] == "not a PDF file (no %PDF header)"
        assert "not a JSON Canvas file" in left["bad/broken.canvas"]["reason"]
        assert left["bad/bomb.png"]["reason"].startswith("20000 x 20000 pixels is over")
        assert daemon.search("heron count", k=1)[0]["path"] == "note.md"
        peak = peak_rss_mb(daemon.process.pid)
        assert peak < unit_memory_high_mb(), peak
    # And with the shipped cap it is left out by its size, never read.
    (tmp_path / "capped").mkdir()
    with running(vault, tmp_path / "capped") as daemon:
        left = {e["path"]: e for e in daemon.request("GET", "/v1/status")["left_out"]}
        assert "64 MB limit" in left["huge.pdf"]["reason"], left
