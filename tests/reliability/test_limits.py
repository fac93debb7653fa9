"""The kernel's inotify limits (RELIABILITY.md cases 1 and 2), met by the real daemon.

The limits are global to the machine, so they are not lowered here. Instead the daemon runs
with a `sitecustomize` module (found through PYTHONPATH) that changes one thing in watchdog:
- VDTEST_INOTIFY_WATCHES=N: libc's inotify_add_watch fails with ENOSPC once N directories are
  watched, exactly as the kernel does at fs.inotify.max_user_watches (watchdog's own tests
  patch `ctypes.get_errno` the same way).
- VDTEST_HOLD_INOTIFY=FILE: while FILE exists, watchdog's reader stops reading the inotify
  descriptor (a busy consumer). Events pile up in the kernel until its queue
  (fs.inotify.max_queued_events) overflows for real, and the kernel reports IN_Q_OVERFLOW.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness.convergence import assert_converged
from harness.daemon import RunningDaemon, fault_env, running, wait_until
from vaultd.errors import DaemonError

SITECUSTOMIZE = """
import os

_limit = os.environ.get("VDTEST_INOTIFY_WATCHES")
if _limit is not None:
    import ctypes
    import errno

    from watchdog.observers import inotify_c

    _add_watch = inotify_c.inotify_add_watch
    _watched = set()

    def _limited_add_watch(fd, path, mask):
        if path not in _watched and len(_watched) >= int(_limit):
            ctypes.set_errno(errno.ENOSPC)
            return -1
        _watched.add(path)
        return _add_watch(fd, path, mask)

    inotify_c.inotify_add_watch = _limited_add_watch

_hold = os.environ.get("VDTEST_HOLD_INOTIFY")
if _hold is not None:
    import time

    from watchdog.observers import inotify_c

    # The call watchdog's reader thread makes for each read of the descriptor: since
    # watchdog 7 that is `_read_event_buffer` (its `run` loop no longer goes through the
    # public `read_events`, so holding that one would hold nothing).
    _name = "_read_event_buffer"
    if not hasattr(inotify_c.InotifyFD, _name):
        _name = "read_events"
    _read = getattr(inotify_c.InotifyFD, _name)

    def _held_read(self, *args, **kwargs):
        if os.path.exists(_hold):
            open(_hold + ".parked", "w").close()
            while os.path.exists(_hold):
                time.sleep(0.02)
        return _read(self, *args, **kwargs)

    setattr(inotify_c.InotifyFD, _name, _held_read)
"""


def patched(tmp_path: Path, **settings: str) -> dict[str, str]:
    return fault_env(tmp_path, SITECUSTOMIZE, **settings)


def status(daemon: RunningDaemon) -> dict[str, Any]:
    answer: dict[str, Any] = daemon.request("GET", "/v1/status")
    return answer


def note(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {path.stem}\n\n{text}\n")


def make_vault(root: Path) -> Path:
    vault = root / "vault"
    note(vault / "alpha.md", "An ordinary note called alpha.")
    note(vault / "sub" / "bravo.md", "An ordinary note called bravo.")
    return vault


# -- the watch limit ----------------------------------------------------------------------------


def test_the_watch_limit_at_start_up_falls_back_to_polling_and_says_so(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    env = patched(tmp_path, VDTEST_INOTIFY_WATCHES="0")
    with running(vault, tmp_path, env=env) as daemon:
        watch = status(daemon)["watch"]
        assert watch["mode"] == "polling"
        assert "fs.inotify.max_user_watches" in watch["fallback_reason"]
        assert "inotify watch limit reached" in watch["fallback_reason"]
        log = daemon.log_text().splitlines()
        warnings = [line for line in log if "watching by polling" in line]
        assert len(warnings) == 1 and "fs.inotify.max_user_watches" in warnings[0]

        # Changes are still picked up, within the poll interval.
        note(vault / "sub" / "quokka.md", "A new note about the quokka.")
        note(vault / "alpha.md", "An ordinary note called alpha, now about the zymurgy.")
        (vault / "sub" / "bravo.md").unlink()
        for word, path in (("quokka", "sub/quokka.md"), ("zymurgy", "alpha.md")):
            hits = daemon.search(word, mode="keyword", wait_for=path)
            assert [h["path"] for h in hits] == [path]
        wait_until(lambda: not daemon.search("bravo", mode="keyword"), "the deletion is seen")
        assert_converged(daemon, vault, tmp_path)


def polling_warnings(daemon: RunningDaemon) -> list[str]:
    return [line for line in daemon.log_text().splitlines() if "watching by polling" in line]


def test_the_watch_limit_reached_below_the_root_falls_back_to_polling(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    # The root gets its watch; `sub/` and any folder created later do not. watchdog raises
    # only for the root and skips the rest silently.
    env = patched(tmp_path, VDTEST_INOTIFY_WATCHES="1")
    with running(vault, tmp_path, env=env) as daemon:
        warnings = polling_warnings(daemon)
        assert len(warnings) == 1 and "fs.inotify.max_user_watches" in warnings[0]
        note(vault / "sub" / "quokka.md", "A new note about the quokka.")
        note(vault / "later" / "zymurgy.md", "A new note about the zymurgy.")
        found = []
        for path in ("sub/quokka.md", "later/zymurgy.md"):
            try:
                daemon.search("x", mode="keyword", wait_for=path)
                found.append(path)
            except DaemonError:
                pass
        watch = status(daemon)["watch"]
        assert watch["mode"] == "polling", watch
        assert "fs.inotify.max_user_watches" in watch["fallback_reason"]
        assert found == ["sub/quokka.md", "later/zymurgy.md"]
        assert_converged(daemon, vault, tmp_path)


def test_the_watch_limit_reached_by_a_folder_created_later_switches_to_polling(
    tmp_path: Path,
) -> None:
    vault = make_vault(tmp_path)
    # The root and `sub/` are watched at start-up; the next folder is one too many.
    env = patched(tmp_path, VDTEST_INOTIFY_WATCHES="2")
    with running(vault, tmp_path, env=env) as daemon:
        assert status(daemon)["watch"] == {"mode": "native", "fallback_reason": ""}
        daemon.wait_idle()

        # Written before polling begins, into a folder native watching cannot see: only the
        # full reconcile that comes with the switch finds it.
        note(vault / "later" / "deep" / "zymurgy.md", "A new note about the zymurgy.")
        # Both: the switch says so in the log once polling runs, after status shows it.
        wait_until(
            lambda: status(daemon)["watch"]["mode"] == "polling" and bool(polling_warnings(daemon)),
            "polling begins",
        )
        watch = status(daemon)["watch"]
        assert "fs.inotify.max_user_watches" in watch["fallback_reason"]
        assert "inotify watch limit reached" in watch["fallback_reason"]
        warnings = polling_warnings(daemon)
        assert len(warnings) == 1 and "fs.inotify.max_user_watches" in warnings[0]
        assert json.loads(warnings[0])["unwatched"] == "later"  # the folder left unwatched
        path = "later/deep/zymurgy.md"
        hits = daemon.search("zymurgy", mode="keyword", wait_for=path)
        assert [h["path"] for h in hits] == [path]

        # From then on, changes anywhere are polled.
        note(vault / "later" / "deep" / "zymurgy.md", "The zymurgy note, now about the quokka.")
        note(vault / "sub" / "bravo.md", "An ordinary note called bravo, and a wombat.")
        for word, path in (("quokka", "later/deep/zymurgy.md"), ("wombat", "sub/bravo.md")):
            hits = daemon.search(word, mode="keyword", wait_for=path)
            assert [h["path"] for h in hits] == [path]
        assert_converged(daemon, vault, tmp_path)


# -- an event storm larger than the kernel's queue -----------------------------------------------


def max_queued_events() -> int:
    try:
        return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    except (OSError, ValueError) as exc:
        pytest.skip(f"cannot read fs.inotify.max_queued_events: {exc}")


def test_an_event_storm_beyond_the_kernel_queue_triggers_a_full_reconcile(tmp_path: Path) -> None:
    queue = max_queued_events()
    if queue > 100_000:
        pytest.skip(f"fs.inotify.max_queued_events is {queue}; a storm that size takes too long")
    vault = tmp_path / "vault"
    notes = [vault / f"f{i % 4}" / f"n{i:03}.md" for i in range(120)]
    for i, path in enumerate(notes):
        note(path, f"Note number {i} in folder f{i % 4}.")
    hold = tmp_path / "hold-inotify"
    env = patched(tmp_path, VDTEST_HOLD_INOTIFY=str(hold))
    with running(vault, tmp_path, env=env) as daemon:
        try:
            # Stop watchdog's reader: it parks at its next read, after one more event. The
            # event is repeated until it parks: on a busy machine one may come before the
            # reader is back at its read, or the watch may still be settling.
            hold.touch()
            parked = Path(f"{hold}.parked")

            def nudged_and_parked() -> bool:
                if parked.exists():
                    return True
                os.utime(notes[0])
                return False

            wait_until(nudged_and_parked, "watchdog's reader is held")
            before = status(daemon)

            # More events than the kernel queues (each utime is one IN_ATTRIB; alternating
            # files keeps the kernel from merging them) ...
            for i in range(queue + 2000):
                os.utime(notes[i % len(notes)])
            # ... then the changes that matter, whose events the kernel drops: 80 renames,
            # 15 deletions, 25 edits and 150 new notes.
            for path in notes[:80]:
                path.rename(path.with_name(f"renamed-{path.name}"))
            for path in notes[80:95]:
                path.unlink()
            for path in notes[95:]:
                note(path, f"{path.stem} was edited during the storm.")
            for i in range(150):
                note(vault / "storm" / f"s{i:03}.md", f"Storm note {i}, code storm{i:03}x.")
        finally:
            hold.unlink(missing_ok=True)

        wait_until(
            lambda: "file events were lost; reconciling the whole vault" in daemon.log_text(),
            "the overflow is noticed",
        )
        daemon.wait_idle()
        after = status(daemon)
        assert after["last_reconcile_at"] != before["last_reconcile_at"]
        # Only the new and edited texts were embedded; the renames cost nothing.
        assert after["embedded_total"] - before["embedded_total"] == 150 + 25
        assert after["notes"] == 120 - 15 + 150
        hits = daemon.search("storm042x", mode="keyword")
        assert [h["path"] for h in hits] == ["storm/s042.md"]
        assert_converged(daemon, vault, tmp_path)
