"""Edits that keep a note's size and mtime (issue 35, finding 1), on a real daemon.

A word swapped for another of the same length, then the old mtime put back (`touch -r`), must
be indexed live, after a restart, by `vaultd reindex` and by `vaultd reindex PATH`. On a
filesystem with 1-second timestamps, two same-size saves within one second must not lose the
second: there the kernel gives both saves the same mtime and ctime, so only the racy rule
(a stat recorded within the timestamp granularity of the hash is not trusted) sees it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.convergence import assert_same, export_of, fresh_export
from harness.daemon import PATIENCE, RunningDaemon, running, start
from vaultd.config import load_config
from vaultd.index.open import open_index

pytestmark = pytest.mark.slow

#: Long enough before now that the racy rule trusts the stat: only the ctime can tell.
AN_HOUR = 3600 * 10**9


def seed(vault: Path) -> Path:
    vault.mkdir(parents=True, exist_ok=True)
    (vault / "Heron.md").write_text("# Heron\n\nHerons stand still in shallow water.\n")
    note = vault / "Otter.md"
    note.write_text("# Otter\n\nOtters hold hands while asleep in kelp.\n")
    old = time.time_ns() - AN_HOUR
    for file in vault.iterdir():
        os.utime(file, ns=(old, old))
    return note


def swap_word(note: Path, old: str, new: str) -> None:
    """Replace `old` with `new` (same length) in place and put the old mtime back, as
    `touch -r ref.md note` does: the size and the mtime are what they were."""
    assert len(old.encode()) == len(new.encode())
    before = note.stat()
    text = note.read_text()
    assert old in text
    with note.open("r+b") as handle:
        handle.write(text.replace(old, new).encode())
    os.utime(note, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = note.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (
        before.st_size,
        before.st_mtime_ns,
        before.st_ino,
    )


def found(daemon: RunningDaemon, word: str) -> set[str]:
    return {h["path"] for h in daemon.search(word, k=10, mode="keyword")}


def eventually_found(daemon: RunningDaemon, word: str, path: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while found(daemon, word) != {path}:
        if time.monotonic() > deadline:
            pytest.fail(f"{word!r} not found in {path} within {PATIENCE} s")
        time.sleep(0.05)


def vaultd(config: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "vaultd", *args, "--config", str(config)],
        check=True,
        capture_output=True,
        timeout=PATIENCE * 2,
    )


def test_a_same_size_same_mtime_edit_is_indexed_live(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    note = seed(vault)
    with running(vault, tmp_path) as daemon:
        assert found(daemon, "kelp") == {"Otter.md"}
        swap_word(note, "kelp", "reef")
        # A client waiting for the note to be current is not answered before it is.
        hits = daemon.search("reef", k=10, mode="keyword", wait_for="Otter.md")
        assert {h["path"] for h in hits} == {"Otter.md"}
        assert found(daemon, "kelp") == set()
    assert_same(export_of(daemon.config), fresh_export(vault, tmp_path / "reference"))


def restart_finds_reef(daemon: RunningDaemon, vault: Path, tmp_path: Path) -> None:
    """A restart of the stopped `daemon` finds the second text, not the first, and its index
    equals a fresh one."""
    again = start(daemon.config, daemon.socket, daemon.log)
    try:
        again.wait_idle()
        assert found(again, "reef") == {"Otter.md"}
        assert found(again, "kelp") == set()
    finally:
        assert again.stop() == 0
    assert_same(export_of(daemon.config), fresh_export(vault, tmp_path / "reference"))


def test_a_same_size_same_mtime_edit_is_indexed_after_a_restart(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    note = seed(vault)
    with running(vault, tmp_path) as daemon:
        daemon.wait_idle()
    swap_word(note, "kelp", "reef")
    restart_finds_reef(daemon, vault, tmp_path)


@pytest.mark.parametrize("named", [False, True], ids=["full", "path"])
def test_a_same_size_same_mtime_edit_is_indexed_by_reindex(tmp_path: Path, named: bool) -> None:
    vault = tmp_path / "vault"
    note = seed(vault)
    with running(vault, tmp_path) as daemon:
        daemon.wait_idle()
    swap_word(note, "kelp", "reef")
    # No daemon: `vaultd reindex` does the work itself, in a process of its own.
    vaultd(daemon.config, "reindex", *(["Otter.md"] if named else []))
    records = export_of(daemon.config)
    assert any("reef" in r["document"] for r in records)
    assert not any("kelp" in r["document"] for r in records)
    assert_same(records, fresh_export(vault, tmp_path / "reference"))


# -- a filesystem with 1-second timestamps -------------------------------------------------


@pytest.fixture
def coarse_fs(tmp_path: Path) -> Iterator[Path]:
    """An ext4 filesystem with 128-byte inodes (whole-second timestamps) on a loop device."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        pytest.skip("needs root and mkfs.ext4 to mount a filesystem with 1-second timestamps")
    image, mount = tmp_path / "fs.img", tmp_path / "mnt"
    mount.mkdir()
    with image.open("wb") as handle:
        handle.truncate(32 << 20)
    made = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-I", "128", str(image)], capture_output=True, text=True
    )
    mounted = (
        made.returncode == 0
        and (
            subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip(f"cannot loop-mount a filesystem here: {made.stderr.strip() or 'mount failed'}")
    try:
        probe = mount / "probe"
        probe.write_text("x")
        assert probe.stat().st_mtime_ns % 10**9 == 0, "expected whole-second timestamps"
        probe.unlink()
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False, capture_output=True)


#: Linux's CLOCK_REALTIME_COARSE, the clock the kernel stamps files with.
COARSE_CLOCK = getattr(time, "CLOCK_REALTIME_COARSE", 5)


def next_second() -> None:
    """Wait for the start of the next second, leaving nearly all of it. By the clock the kernel
    stamps files with: it trails `time.time()` by up to a tick, so a save just after the
    precise clock's second began could still be stamped with the second before."""
    target = int(time.time()) + 1
    while time.clock_gettime(COARSE_CLOCK) < target:
        time.sleep(0.002)


def same_times(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stats of one file agree on all a stat compare could see: what the kernel
    gives two saves of one size within one tick of a coarse clock."""
    return (a.st_size, a.st_mtime_ns, a.st_ctime_ns, a.st_ino) == (
        b.st_size,
        b.st_mtime_ns,
        b.st_ctime_ns,
        b.st_ino,
    )


def save(note: Path, text: str) -> None:
    """A save in place, as most editors do it (same inode)."""
    with note.open("r+b") as handle:
        handle.write(text.encode())
        handle.truncate()


def test_two_saves_within_one_second_survive_a_restart(coarse_fs: Path, tmp_path: Path) -> None:
    vault = coarse_fs / "vault"
    note = seed(vault)
    with running(vault, tmp_path) as daemon:
        daemon.wait_idle()
    config = load_config(daemon.config, env={})
    first, second = "# Otter\n\nOtters float in kelp.\n", "# Otter\n\nOtters float in reef.\n"
    with open_index(config, env={}) as index:
        for _ in range(10):
            next_second()
            save(note, first)
            saved = note.stat()
            index.indexer.reconcile_paths(["Otter.md"])
            save(note, second)
            if same_times(saved, note.stat()):
                break  # both saves, and the read between them, within one second
        else:
            pytest.skip("could not save, index and save again within one second here")
    restart_finds_reef(daemon, vault, tmp_path)


def test_two_saves_within_one_second_are_indexed_live(coarse_fs: Path, tmp_path: Path) -> None:
    vault = coarse_fs / "vault"
    note = seed(vault)
    # Pairs of distinct words of one length, none in the seed.
    words = [
        "reef",
        "dune",
        "moss",
        "fern",
        "reed",
        "pond",
        "tarn",
        "vale",
        "glen",
        "cove",
        "bank",
        "lake",
        "pool",
        "peat",
    ]
    words += [
        "silt",
        "sand",
        "rock",
        "hill",
        "crag",
        "dell",
        "fell",
        "moor",
        "mere",
        "loch",
        "weir",
        "ford",
        "isle",
        "cape",
    ]
    missed = {"slow": 0, "late": 0}
    with running(vault, tmp_path, debounce="20ms") as daemon:
        daemon.wait_idle()
        for first, second in zip(words[0::2], words[1::2], strict=True):
            next_second()
            save(note, f"# Otter\n\nOtters float in {first}.\n")
            saved = note.stat()
            # The daemon reads the first save; the second must land within the same second.
            while found(daemon, first) != {"Otter.md"} and int(time.time()) == saved.st_mtime:
                time.sleep(0.01)
            if found(daemon, first) != {"Otter.md"}:
                missed["slow"] += 1
                continue
            save(note, f"# Otter\n\nOtters float in {second}.\n")
            if not same_times(saved, note.stat()):
                missed["late"] += 1
                continue
            eventually_found(daemon, second, "Otter.md")
            assert found(daemon, first) == set()
            break
        else:
            pytest.skip(f"the daemon never read a save within the second it was made in {missed}")
        daemon.wait_idle()
    assert_same(export_of(daemon.config), fresh_export(vault, tmp_path / "reference"))


def test_reindex_on_a_running_daemon_reads_what_it_is_given(tmp_path: Path) -> None:
    """Named notes, or every note, are read whatever their stat: the user's answer to any
    doubt about the index."""
    vault = tmp_path / "vault"
    seed(vault)
    with running(vault, tmp_path) as daemon:
        daemon.wait_idle()

        def reads() -> int:
            daemon.wait_idle()
            return int(daemon.request("GET", "/v1/status")["notes_read_total"])

        before = reads()
        vaultd(daemon.config, "reindex", "Otter.md")
        assert reads() == before + 1
        vaultd(daemon.config, "reindex")
        assert reads() == before + 3
