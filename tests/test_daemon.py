"""`vaultd run` for real: a subprocess, real files, watchdog, the socket, signals, kill -9."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.convergence import assert_same, export_of, fresh_export
from harness.crash import index_command, kill_after, recover
from harness.daemon import PATIENCE, RunningDaemon, running, short_socket_dir, start, write_config
from harness.vaults import note, pin_mtimes, random_operations, random_text

pytestmark = pytest.mark.slow


def seed_vault(vault: Path) -> None:
    (vault / "Animals").mkdir(parents=True)
    (vault / "Animals" / "Otter.md").write_text(note("Otter", "Otters hold hands while asleep."))
    (vault / "Animals" / "Heron.md").write_text(
        note("Heron", "Herons stand still in shallow water.")
    )
    (vault / "Garden.md").write_text(note("Garden", "Tomatoes want the south wall."))


def paths_for(daemon: RunningDaemon, query: str) -> set[str]:
    return {h["path"] for h in daemon.search(query, k=50, mode="keyword")}


def paths_for_since(daemon: RunningDaemon, query: str, since: float) -> set[str]:
    """`paths_for`, among the notes the index has as modified at `since` or later."""
    found = daemon.search(query, k=50, mode="keyword", modified_since=since)
    return {h["path"] for h in found}


def eventually(check: Callable[[], bool], what: str, timeout: float = PATIENCE) -> float:
    """Wait for `check`; return how long it took, failing after `timeout`."""
    started = time.monotonic()
    while True:
        if check():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def embedded(daemon: RunningDaemon) -> int:
    return int(daemon.request("GET", "/v1/status")["embedded_total"])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[RunningDaemon, Path]]:
    vault = tmp_path / "vault"
    seed_vault(vault)
    with running(vault, tmp_path) as daemon:
        yield daemon, vault


def test_every_kind_of_change_becomes_searchable(
    live: tuple[RunningDaemon, Path], tmp_path: Path
) -> None:
    daemon, vault = live
    assert paths_for(daemon, "otters") == {"Animals/Otter.md"}

    # create
    (vault / "Zebra.md").write_text(note("Zebra", "Zebra stripes confuse biting flies."))
    eventually(lambda: paths_for(daemon, "stripes") == {"Zebra.md"}, "create")

    # edit in place
    (vault / "Zebra.md").write_text(note("Zebra", "Zebras sleep standing; an okapi does not."))
    eventually(lambda: paths_for(daemon, "okapi") == {"Zebra.md"}, "edit")
    assert paths_for(daemon, "stripes") == set()

    # atomic save: a temp file renamed over the note
    tmp = vault / ".Zebra.md.tmp"
    tmp.write_text(note("Zebra", "Zebras graze with wildebeest on the savanna."))
    os.replace(tmp, vault / "Zebra.md")
    eventually(lambda: paths_for(daemon, "wildebeest") == {"Zebra.md"}, "atomic save")

    # rename: no embedding (once the save's vectors are in: its words are found first)
    daemon.wait_idle()
    before = embedded(daemon)
    (vault / "Zebra.md").rename(vault / "Animals" / "Zebra.md")
    eventually(lambda: paths_for(daemon, "wildebeest") == {"Animals/Zebra.md"}, "rename")
    assert embedded(daemon) == before

    # folder rename: no embedding
    (vault / "Animals").rename(vault / "Fauna")
    expected = {"Fauna/Otter.md", "Fauna/Heron.md", "Fauna/Zebra.md"}
    eventually(lambda: paths_for(daemon, "otters herons wildebeest") == expected, "folder rename")
    assert embedded(daemon) == before

    # folder moved out of the vault
    outside = tmp_path / "outside"
    outside.mkdir()
    (vault / "Fauna").rename(outside / "Fauna")
    eventually(lambda: paths_for(daemon, "otters herons wildebeest") == set(), "folder moved out")

    # folder moved in
    (outside / "Fauna").rename(vault / "Back")
    eventually(lambda: paths_for(daemon, "otters") == {"Back/Otter.md"}, "folder moved in")

    # move into .trash is a delete
    (vault / ".trash").mkdir()
    (vault / "Back" / "Heron.md").rename(vault / ".trash" / "Heron.md")
    eventually(lambda: paths_for(daemon, "herons") == set(), "move into .trash")

    # delete
    (vault / "Garden.md").unlink()
    eventually(lambda: paths_for(daemon, "tomatoes") == set(), "delete")

    # touch: no embedding, still there (and seen: the index has the new time)
    before = embedded(daemon)
    later = int(time.time()) + 100
    os.utime(vault / "Back" / "Otter.md", (later, later))
    eventually(
        lambda: paths_for_since(daemon, "otters", later) == {"Back/Otter.md"}, "the touch is seen"
    )
    daemon.wait_idle()
    assert paths_for(daemon, "otters") == {"Back/Otter.md"}
    assert embedded(daemon) == before

    status = daemon.request("GET", "/v1/status")
    assert status["status"] == "ok" and status["lag_seconds"]["samples"] > 0
    assert daemon.stop() == 0


def test_vault_root_removed_degrades_and_rearms(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    seed_vault(vault)
    with running(vault, tmp_path) as daemon:
        parked = tmp_path / "parked"
        vault.rename(parked)
        eventually(
            lambda: daemon.request("GET", "/v1/health")["status"] == "degraded",
            "degraded when the vault disappears",
        )
        # Never purged: the index still answers from what it had.
        assert paths_for(daemon, "otters") == {"Animals/Otter.md"}
        parked.rename(vault)
        eventually(lambda: daemon.request("GET", "/v1/health")["status"] == "ok", "re-armed")
        (vault / "New.md").write_text(note("New", "Capybaras share their pond."))
        eventually(lambda: paths_for(daemon, "capybaras") == {"New.md"}, "watching again")


# -- convergence: whatever happened, the store equals a fresh index ----------------------------


def test_random_operations_converge_to_a_fresh_index(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    seed_vault(vault)
    outside = tmp_path / "outside"
    outside.mkdir()
    with running(vault, tmp_path) as daemon:
        random_operations(vault, outside, random.Random(20261130), 1000)
        # Events arrive in order: once a note written after the rest is indexed, every
        # earlier change has been handed over, and idle then means done.
        (vault / "Last.md").write_text(note("Last", "Written after every other change."))
        daemon.search("x", mode="keyword", wait_for="Last.md")
        daemon.wait_idle()
        assert daemon.stop() == 0
    assert_same(export_of(daemon.config), fresh_export(vault, tmp_path))


def manifest_counts(manifest: Path) -> tuple[int, int, int] | None:
    """(notes in hand, notes recorded, vectors recorded) from a manifest being written, or
    None before it has its tables."""
    try:
        db = sqlite3.connect(f"file:{manifest}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        return (
            db.execute("SELECT COUNT(*) FROM in_flight").fetchone()[0],
            db.execute("SELECT COUNT(*) FROM notes").fetchone()[0],
            db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0],
        )
    except sqlite3.Error:
        return None
    finally:
        db.close()


def kill_in_phase(
    process: subprocess.Popen[bytes], manifest: Path, phase: str, in_hand: int, delay: float
) -> tuple[int, int, int] | None:
    """SIGKILL a first index at a moment of one of its phases, found by watching its manifest:
    the keyword phase after its `in_hand`-th note is in hand (nothing is committed until the
    batch is), the embedding phase `delay` seconds after the keyword phase committed. Returns
    the counts seen last before the kill, or None when the moment was missed: the index ended
    first (the delay was longer than this machine's embedding phase), or, on a busy machine,
    the keyword phase committed between two looks."""
    deadline = time.monotonic() + PATIENCE
    counts = None
    missed = False
    while process.poll() is None and time.monotonic() < deadline:
        counts = manifest_counts(manifest)
        if counts is not None:
            if phase == "keyword" and counts[1] == 0 and counts[0] >= in_hand:
                break
            if phase == "keyword" and counts[1] > 0:
                missed = True
                break
            if phase == "embed" and counts[1] > 0:
                time.sleep(delay)
                break
        time.sleep(0.002)
    assert counts is not None
    process.send_signal(signal.SIGKILL)
    code = process.wait(30)
    if missed or code == 0:
        return None
    assert code == -signal.SIGKILL, f"the index exited with {code} before the kill"
    return counts


@pytest.mark.parametrize("trial", range(10))
def test_kill_9_in_either_phase_of_the_initial_index_converges(
    trial: int, tmp_path: Path, crash_vault: tuple[Path, list[dict[str, Any]]]
) -> None:
    base, reference = crash_vault
    vault = tmp_path / "vault"
    shutil.copytree(base, vault)
    rng = random.Random(trial)
    phase = ("keyword", "embed")[trial % 2]
    in_hand, delay = rng.randint(1, 30), rng.uniform(0.0, 1.0)
    # A moment missed (a delay past the end of the embedding phase on a fast machine, a
    # keyword phase that committed between two looks on a busy one) is tried again, halved,
    # on a fresh data directory: the kill must land inside the phase.
    for attempt in range(8):
        data = tmp_path / f"data-{attempt}"
        config = write_config(tmp_path / "c.toml", vault, data, short_socket_dir() / "s")
        process = subprocess.Popen(index_command(config), stderr=subprocess.DEVNULL)
        seen = kill_in_phase(process, data / "vaultd.db", phase, in_hand, delay)
        after = manifest_counts(data / "vaultd.db")
        assert after is not None
        # Killed with every vector recorded is after the phase's work, not in it.
        if seen is not None and (phase == "keyword" or after[2] < len(reference)):
            break
        delay /= 2
        in_hand = max(1, in_hand // 2)
    else:
        pytest.fail(f"no kill landed inside the {phase} phase in 8 tries")
    if phase == "keyword":
        assert seen[1] == 0 and after[2] == 0, (seen, after)  # no vector was recorded
    else:
        assert after[1] == 40, (seen, after)  # the keyword phase had committed every note
    assert_same(recover(config), reference)


@pytest.mark.parametrize("trial", range(5))
def test_kill_9_during_a_burst_of_edits_converges(
    trial: int,
    tmp_path: Path,
    crash_vault: tuple[Path, list[dict[str, Any]]],
    indexed_data: Path,
    burst_reference: list[dict[str, Any]],
) -> None:
    base, _ = crash_vault
    # The finished index belongs to one vault path: reuse that path with a fresh copy. The
    # data directory gets a new path each time: Chroma caches clients per path in-process.
    vault = indexed_data.parent / "vault"
    shutil.rmtree(vault, ignore_errors=True)
    shutil.copytree(base, vault)
    shutil.copytree(indexed_data, tmp_path / "data")
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(tmp_path / "c.toml", vault, tmp_path / "data", socket, debounce="100ms")
    daemon = start(config, socket, tmp_path / "vaultd.log")
    # The same burst every time (so one fresh index is the reference); the kill moment varies.
    random_operations(vault, tmp_path, random.Random(BURST_SEED), 60)
    kill_after(daemon.process, random.Random(trial).uniform(0.05, 2.5))
    # Pin the mtimes, which the store records, to those of the reference tree (a touch of every
    # note while stopped: recovery must absorb that too).
    pin_mtimes(vault)
    assert_same(recover(config), burst_reference)


BURST_SEED = 1000


@pytest.fixture(scope="module")
def burst_reference(
    tmp_path_factory: pytest.TempPathFactory, crash_vault: tuple[Path, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """A fresh index of the crash vault after the burst."""
    root = tmp_path_factory.mktemp("burst")
    vault = root / "vault"
    shutil.copytree(crash_vault[0], vault)
    random_operations(vault, root, random.Random(BURST_SEED), 60)
    pin_mtimes(vault)
    return fresh_export(vault, root)


@pytest.fixture(scope="module")
def crash_vault(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A vault big enough that indexing it takes a few seconds, and its fresh export."""
    root = tmp_path_factory.mktemp("crash")
    vault = root / "vault"
    vault.mkdir()
    rng = random.Random(7)
    for i in range(40):
        folder = vault / f"f{i % 4}"
        folder.mkdir(exist_ok=True)
        (folder / f"n{i}.md").write_text(random_text(rng, f"Note {i}") * 3)
    return vault, fresh_export(vault, root)


@pytest.fixture(scope="module")
def indexed_data(
    tmp_path_factory: pytest.TempPathFactory, crash_vault: tuple[Path, list[dict[str, Any]]]
) -> Path:
    """The finished index of the crash vault (kept pristine; trials work on copies)."""
    root = tmp_path_factory.mktemp("indexed")
    vault = root / "vault"
    shutil.copytree(crash_vault[0], vault)
    config = write_config(root / "c.toml", vault, root / "data", short_socket_dir() / "s")
    subprocess.run(index_command(config), check=True, stderr=subprocess.DEVNULL)
    shutil.copytree(root / "data", root / "pristine")
    return root / "pristine"


SIGNAL_WHILE_LOCKED = """
import os, signal, sys
from pathlib import Path
from vaultd.config import load_config
from vaultd.daemon.lifecycle import Daemon

daemon = Daemon(load_config(Path(sys.argv[1]), env={}), env={})
with daemon.signals.installed():
    # Where the main loop spends its life: inside Event.wait, holding the event's lock for a
    # moment on the way in and out. A signal landing there runs its handler on this thread.
    with daemon.signals._stop._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):
            pass
    assert daemon.signals.sleep(0), "the stop was lost"
print("stopped")
"""


def test_a_signal_landing_while_the_main_loop_holds_a_lock_still_stops_it(
    tmp_path: Path,
) -> None:
    """The handler takes no lock: it once set an Event, and deadlocked (SIGTERM then never
    stopped the daemon) when it landed while the main thread was inside that Event's wait."""
    (tmp_path / "vault").mkdir()
    config = write_config(
        tmp_path / "vaultd.toml", tmp_path / "vault", tmp_path / "data", tmp_path / "s.sock"
    )
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_WHILE_LOCKED, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr


SECOND_INTERRUPT_WHILE_EXITING = """
import os, signal, sys, threading
from pathlib import Path
from vaultd.config import load_config
from vaultd.daemon.lifecycle import Daemon

daemon = Daemon(load_config(Path(sys.argv[1]), env={}), env={})
with daemon.signals.installed():
    os.kill(os.getpid(), signal.SIGINT)
    assert daemon.signals.sleep(30), "the stop was lost"
# Past the handlers' block: the process's exit, which may wait (a thread joined, say).
os.kill(os.getpid(), signal.SIGINT)
threading.Event().wait(60)
print("still running")
"""


def test_a_second_ctrl_c_while_the_daemon_exits_exits_1_at_once(tmp_path: Path) -> None:
    """Issue 51, finding 6: once the handlers were restored, a second Ctrl-C raised
    KeyboardInterrupt inside the interpreter's exit (a traceback from concurrent.futures) and
    the process went on waiting."""
    (tmp_path / "vault").mkdir()
    config = write_config(
        tmp_path / "vaultd.toml", tmp_path / "vault", tmp_path / "data", tmp_path / "s.sock"
    )
    done = subprocess.run(
        [sys.executable, "-c", SECOND_INTERRUPT_WHILE_EXITING, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "still running" not in done.stdout, done
    assert "second interrupt" in done.stderr and "Traceback" not in done.stderr, done.stderr
