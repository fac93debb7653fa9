"""A file reader killed from outside costs a second read, not the file (issue 51, finding 7).

The real `vaultd index` reads a real screenshot in its real OCR worker, and the test kills that
worker (found by its pid) with SIGINT or SIGKILL while it reads. Before, the file was left out
until the next hourly pass: "the reader crashed on it (exit -2)" after a SIGINT, "the reader
was killed reading it (out of memory?)" after a SIGKILL, which no kernel had said. Now the
file is given to a fresh worker: indexed when that one reads it, left out as damaged only when
it dies too, and "out of memory" only when the kernel counted an OOM kill.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.convergence import export_of
from harness.daemon import PATIENCE, short_socket_dir, wait_until, write_config
from harness.interrupt import GONE_WITHIN, MARK, marked, wait_gone
from tests.conftest import shared_path
from vaultd import isolation
from vaultd.errors import LeftOutError
from vaultd.index.extract import OCR_CHILD
from vaultd.pipeline.ocr import MIN_WORKER_MB

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

#: About three seconds of OCR on a quiet machine: a kill as its reader appears lands mid-read.
SCREENSHOT = "Mac-OS-DateTime.png"
IMAGE = f"Attachments/{SCREENSHOT}"
CONFIG = '[attachments]\nocr = true\nextract_timeout = "10m"\n'
#: How long one Ctrl-C may take to end `vaultd index`.
LIMIT = 5.0


def vault_with_screenshot(tmp_path: Path) -> Path:
    """A vault of the screenshot and a note; its config."""
    vault = tmp_path / "vault"
    (vault / "Attachments").mkdir(parents=True)
    shutil.copy(shared_path("corpora", "attachments", "images", SCREENSHOT), vault / IMAGE)
    (vault / "Home.md").write_text(f"# Home\n\n![[{SCREENSHOT}]]\n", encoding="utf-8")
    return write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s", extra=CONFIG
    )


def start_index(config: Path) -> tuple[subprocess.Popen[str], str]:
    """`vaultd index --json`, leading a process group of its own; the process and its mark."""
    mark = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "vaultd", "index", "--json", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, MARK: mark},
        # Its own group: a SIGINT meant for it never reaches the test's.
        start_new_session=True,
    )
    return process, mark


def ocr_readers(mark: str) -> list[int]:
    return [pid for pid, command in marked(mark) if "vaultd.pipeline.ocr" in command]


def index_killing_readers(tmp_path: Path, sig: int, kills: int) -> tuple[dict[str, Any], Path]:
    """`vaultd index --json` of a vault holding the screenshot, each of its first `kills` OCR
    workers sent `sig` as soon as it runs; the summary and the config."""
    config = vault_with_screenshot(tmp_path)
    process, mark = start_index(config)
    killed: list[int] = []

    def reader() -> int | None:
        return next((pid for pid in ocr_readers(mark) if pid not in killed), None)

    try:
        for _ in range(kills):
            wait_until(
                lambda: process.poll() is not None or reader() is not None,
                "an OCR worker that was not killed yet",
            )
            pid = reader()
            assert pid is not None, "the index ended before its OCR worker was killed"
            os.kill(pid, sig)
            killed.append(pid)
        out, _ = process.communicate(timeout=PATIENCE)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, out
    summary: dict[str, Any] = json.loads(out)
    return summary, config


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_reader_killed_once_costs_a_second_read_not_the_file(tmp_path: Path, sig: int) -> None:
    summary, config = index_killing_readers(tmp_path, sig, kills=1)
    assert summary["left_out"] == [] and summary["failures"] == [], summary
    records = [r for r in export_of(config) if r["metadata"]["path"] == IMAGE]
    assert records and any("Date" in r["document"] for r in records), records


def test_a_reader_killed_twice_leaves_the_file_out_as_damaged_not_out_of_memory(
    tmp_path: Path,
) -> None:
    summary, _ = index_killing_readers(tmp_path, signal.SIGKILL, kills=2)
    (entry,) = summary["left_out"]
    assert entry["path"] == IMAGE, summary
    assert "twice" in entry["reason"] and "SIGKILL" in entry["reason"], entry
    assert "memory" not in entry["reason"], entry


def test_ctrl_c_on_vaultd_index_while_an_image_is_read_stops_it_at_once_and_costs_no_file(
    tmp_path: Path,
) -> None:
    """SIGINT to the whole group, as a terminal sends it: the reader is not hit (it runs in a
    session of its own), the index ends it and exits 130 at once, and the next run reads the
    image. Before, the reader died of the SIGINT and the image was recorded as damaged."""
    config = vault_with_screenshot(tmp_path)
    process, mark = start_index(config)
    try:
        wait_until(
            lambda: process.poll() is not None or bool(ocr_readers(mark)), "an OCR worker runs"
        )
        assert process.poll() is None, "the index ended before it read the image"
        os.killpg(process.pid, signal.SIGINT)
        sent = time.monotonic()
        process.communicate(timeout=PATIENCE)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 128 + signal.SIGINT and took <= LIMIT, (process.returncode, took)
    assert wait_gone(mark, GONE_WITHIN) == []
    again, _ = start_index(config)
    out, _ = again.communicate(timeout=PATIENCE)
    assert again.returncode == 0, out
    status = json.loads(
        subprocess.run(
            [sys.executable, "-m", "vaultd", "status", "--json", "--config", str(config)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert status["left_out"] == [] and status["failed"] == [], status
    assert any(r["metadata"]["path"] == IMAGE for r in export_of(config))


def test_a_reader_killed_twice_is_out_of_memory_only_when_the_kernel_counted_an_oom_kill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel's OOM killer is faked (a test cannot make it choose the reader): its count
    grows while the reader reads, and both kills of the real worker are then its doing."""
    data = shared_path("corpora", "attachments", "images", SCREENSHOT).read_bytes()
    counted = iter(range(1000))
    monkeypatch.setattr(isolation, "oom_kills", lambda: next(counted))
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            isolation.run_child(OCR_CHILD, IMAGE, data, timeout=600, memory_mb=MIN_WORKER_MB)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=read, name="reader")
    thread.start()
    killed: list[int] = []
    try:
        for _ in range(2):

            def fresh() -> int | None:
                for child in list(isolation._children.values()):
                    process = child._process
                    if process is not None and process.pid not in killed:
                        return process.pid
                return None

            wait_until(lambda: not thread.is_alive() or fresh() is not None, "a fresh reader")
            pid = fresh()
            assert pid is not None, outcome
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        thread.join(PATIENCE)
    finally:
        isolation.close_children()
    (error,) = outcome
    assert isinstance(error, LeftOutError) and error.kind == "too_costly", error
    assert "out of memory" in error.reason, error.reason
