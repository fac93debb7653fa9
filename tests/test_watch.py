"""The watcher turns real watchdog events into settled paths, without needless rescans."""

from __future__ import annotations

import os
import time
from pathlib import Path

from vaultd.pipeline.watch import Settled, Watcher


def settled_after(watcher: Watcher, seconds: float = 3.0) -> Settled:
    deadline = time.monotonic() + seconds
    out = Settled()
    while time.monotonic() < deadline:
        got = watcher.take()
        out.paths |= got.paths
        out.dirs |= got.dirs
        out.full = out.full or got.full
        time.sleep(0.05)
    return out


def test_saving_a_note_at_the_root_is_one_path_not_a_full_rescan(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, settle=0.2, is_ignored=lambda p, d: p.startswith("."))
    watcher.start()
    try:
        (tmp_path / "a.md").write_text("one")
        tmp = tmp_path / ".a.md.tmp"
        tmp.write_text("two")
        os.replace(tmp, tmp_path / "a.md")  # an atomic save
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "b.md").write_text("three")
        got = settled_after(watcher)
    finally:
        watcher.stop()
    assert not got.full
    assert got.paths == {"a.md", "sub/b.md"}
    assert got.dirs == {"sub"}


def test_events_are_held_until_the_path_is_quiet(tmp_path: Path) -> None:
    watcher = Watcher(tmp_path, settle=0.5)
    watcher.start()
    try:
        note = tmp_path / "busy.md"
        for i in range(8):  # a note rewritten several times a second
            note.write_text(f"version {i}")
            time.sleep(0.1)
            assert "busy.md" not in watcher.take().paths
        assert settled_after(watcher, 1.5).paths == {"busy.md"}
    finally:
        watcher.stop()
