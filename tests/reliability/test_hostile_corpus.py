"""Hostile files added to a running daemon (issue 51, acceptance 2): canvases of 2,000 and
20,000 nested groups, a PDF naming one page 200,000 times, a canvas of 100,000 cards, a lone
surrogate, a decompression-bomb PNG and a YAML alias bomb. A note edited beside them is
searchable within seconds, each is indexed (in part, with its reason) or left out, and the
daemon stays within the unit's memory; `status` names the file a pass is reading."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from harness.daemon import RunningDaemon, fault_env, running, wait_until
from tests.hostile import (
    many_cards_canvas,
    nested_groups_canvas,
    one_page_many_times_pdf,
    surrogate_canvas,
)
from tests.pipeline.test_ocr import png_bomb
from tests.test_attachments_daemon import peak_rss_mb, unit_memory_high_mb
from tests.test_bad_input import BILLION_LAUGHS

#: What each hostile file becomes with the shipped caps: (in part, reason) or (left out, kind).
EXPECTED = {
    "hostile/nested-20000.canvas": (
        "in_part",
        "only the first 5000 of its 22000 cards are indexed (max_cards)",
    ),
    "hostile/loop.pdf": (
        "in_part",
        "only the first 5000 of its 200000 pages are indexed (max_pages)",
    ),
    "hostile/wall.canvas": (
        "in_part",
        "only the first 5000 of its 100000 cards are indexed (max_cards)",
    ),
    "hostile/bomb.png": ("left_out", "too_big"),
}
#: Indexed whole: the nested groups under the caps, the surrogate (as U+FFFD).
WHOLE = ("hostile/nested-2000.canvas", "hostile/surrogate.canvas")
#: The time a loaded CI machine may take; the acceptance is 5 s. Measured on 2 shared cores:
#: the edit searchable 0.3-0.4 s after its write (before heavy files were deferred to a pass of
#: their own: 0.3-4.4 s, and 15-27 s in about one run in three, when the edit was served with
#: heavy files in a pass that pauses for nothing); every hostile file recorded in 5-21 s; the
#: note request 0.6-1.1 s; peak RSS 425-449 MB.
EDIT_LIMIT = 30.0
HOSTILE_LIMIT = 120.0


def _status(daemon: RunningDaemon) -> dict[str, Any]:
    answer: dict[str, Any] = daemon.request("GET", "/v1/status")
    return answer


def _outcomes(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    found = {e["path"]: ("in_part", e["reason"]) for e in status.get("in_part") or []}
    found |= {e["path"]: ("left_out", e["kind"]) for e in status.get("left_out") or []}
    return found


def _found(daemon: RunningDaemon, query: str, path: str) -> bool:
    """Whether a hit of `path` holds the query's text (a vector search alone answers with
    the nearest passages, whatever they say)."""
    return any(hit["path"] == path and query in hit["text"] for hit in daemon.search(query, k=5))


def test_hostile_files_beside_an_edit_leave_the_daemon_serving(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Home.md").write_text("# Home\n\nNothing here yet.\n")
    # An image is read only with OCR on; its header alone decides, the engine never loads.
    with running(vault, tmp_path, extra="\n[attachments]\nocr = true\n") as daemon:
        hostile = vault / "hostile"
        hostile.mkdir()
        files = {
            "nested-2000.canvas": nested_groups_canvas(2_000),
            "nested-20000.canvas": nested_groups_canvas(20_000),
            "loop.pdf": one_page_many_times_pdf(200_000),
            "wall.canvas": many_cards_canvas(100_000),
            "surrogate.canvas": surrogate_canvas(),
            "bomb.png": png_bomb(20_000, 20_000),
            "laughs.md": BILLION_LAUGHS.encode(),
        }
        for name, data in files.items():
            (hostile / name).write_bytes(data)
        added = time.monotonic()
        (vault / "Home.md").write_text("# Home\n\nThe kestrel nests by the gate.\n")
        edited = time.monotonic()
        wait_until(
            lambda: _found(daemon, "kestrel nests", "Home.md"),
            "the note edited beside the hostile files is searchable",
            timeout=EDIT_LIMIT,
        )
        edit_s = time.monotonic() - edited

        def recorded() -> bool:
            found = _outcomes(_status(daemon))
            return all(found.get(path) == want for path, want in EXPECTED.items())

        wait_until(recorded, "every hostile file is recorded with its reason", HOSTILE_LIMIT)
        hostile_s = time.monotonic() - added
        status = _status(daemon)
        assert status["status"] == "ok", status["reasons"]
        laughs = _outcomes(status).get("hostile/laughs.md")
        assert laughs is not None and laughs[0] == "in_part" and "frontmatter" in laughs[1]
        assert _found(daemon, "surrogatecard", "hostile/surrogate.canvas")
        assert _found(daemon, "card at level 1990", "hostile/nested-2000.canvas")
        assert not {p for p in WHOLE if p in _outcomes(status)}
        # A note request on a capped file answers in time (it did not in 60 s).
        start = time.monotonic()
        pdf = daemon.request("GET", "/v1/notes/hostile/loop.pdf?text=1&start_page=1&end_page=2")
        note_s = time.monotonic() - start
        assert pdf["total_pages"] == 5000 and len(pdf["chunks"]) == 5000
        peak = peak_rss_mb(daemon.process.pid)
        assert peak < unit_memory_high_mb(), peak
        print(
            f"edit searchable after {edit_s:.2f} s; hostile files recorded after "
            f"{hostile_s:.1f} s; note request {note_s:.2f} s; peak RSS {peak:.0f} MB"
        )


#: In the daemon: a canvas holding HOLD_MARKER is read until the file VDTEST_HOLD is removed.
SITECUSTOMIZE = """
import os
import time

from vaultd.pipeline import canvas

_extract = canvas.extract


def _held(path, data, **kwargs):
    hold = os.environ["VDTEST_HOLD"]
    if b"holdmarker" in data:
        while os.path.exists(hold):
            time.sleep(0.02)
    return _extract(path, data, **kwargs)


canvas.extract = _held
"""


def test_status_names_the_file_a_pass_is_reading(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Home.md").write_text("# Home\n\nA note.\n")
    hold = tmp_path / "hold"
    hold.touch()
    env = fault_env(tmp_path, SITECUSTOMIZE, VDTEST_HOLD=str(hold))
    with running(vault, tmp_path, env=env) as daemon:
        assert _status(daemon).get("reading") is None
        slow = b'{"nodes": [{"id": "a", "type": "text", "text": "holdmarker card"}]}'
        (vault / "slow.canvas").write_bytes(slow)

        def reading() -> dict[str, Any] | None:
            value: dict[str, Any] | None = _status(daemon).get("reading")
            return value

        wait_until(lambda: (reading() or {}).get("path") == "slow.canvas", "status names it")
        wait_until(lambda: (reading() or {}).get("seconds", 0) >= 1, "its time is counted")
        hold.unlink()
        wait_until(lambda: reading() is None, "status names no file once it is read")
        assert _found(daemon, "holdmarker", "slow.canvas")


def _big_note(paragraphs: int) -> str:
    """A note of many distinct passages: its pass embeds for seconds, pausing between runs."""
    words = ("heron", "willow", "copper", "lantern", "meadow", "quarry", "ember", "tide")
    lines = ["# Almanac", ""]
    for n in range(paragraphs):
        picked = " ".join(words[(n * 7 + k) % len(words)] for k in range(12))
        lines += [f"Entry {n}: {picked} number {n * 31 % 997}.", ""]
    return "\n".join(lines)


def _heavy_canvas(text: str) -> bytes:
    """A canvas over HEAVY_BYTES (the worker's threshold) whose one card says `text`."""
    cards = [{"id": "a", "type": "text", "text": text}, {"id": "b", "type": "text", "text": ""}]
    cards[1]["text"] = "x" * 1_100_000
    return json.dumps({"nodes": cards}).encode()


def test_an_edit_is_served_while_a_heavy_file_beside_it_is_still_being_read(
    tmp_path: Path,
) -> None:
    """The note and a heavy file asked for together (here by `vaultd reindex`, with the
    watcher's settle time set long so that it takes no part), while another pass embeds or
    after it. On main before this, the heavy file held the note: in one pass with it, or in
    a pass served at a pause point, which pauses for nothing. Here the heavy file's reading
    is held until the note is searchable: the note must not wait for it."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Home.md").write_text("# Home\n\nNothing here yet.\n")
    (vault / "heavy.canvas").write_bytes(_heavy_canvas("plain card"))
    (vault / "Almanac.md").write_text("# Almanac\n\nShort for now.\n")
    hold = tmp_path / "hold"
    env = fault_env(tmp_path, SITECUSTOMIZE, VDTEST_HOLD=str(hold))
    with running(vault, tmp_path, env=env, debounce="600s") as daemon:
        # A pass that embeds for a while, pausing between runs: asked for first.
        (vault / "Almanac.md").write_text(_big_note(3000))
        daemon.request("POST", "/v1/reindex", {"paths": ["Almanac.md"]})
        # The heavy file's reading now waits for the hold; the note is light.
        hold.touch()
        (vault / "heavy.canvas").write_bytes(_heavy_canvas("holdmarker card"))
        (vault / "Home.md").write_text("# Home\n\nThe kestrel nests by the gate.\n")
        daemon.request("POST", "/v1/reindex", {"paths": ["heavy.canvas", "Home.md"]})
        try:
            wait_until(
                lambda: _found(daemon, "kestrel nests", "Home.md"),
                "the note is searchable while the heavy file is held",
                timeout=EDIT_LIMIT,
            )
            assert hold.exists()
        finally:
            hold.unlink()
        wait_until(lambda: _found(daemon, "holdmarker", "heavy.canvas"), "the heavy file read")
        wait_until(lambda: _found(daemon, "quarry", "Almanac.md"), "the long note read")
