"""Changes the watcher never saw: made while the daemon was stopped, or while it was starting.

Case 32: a thousand adds, edits, deletes, renames and folder renames while no daemon runs; the
next start finds them all in its first reconcile, re-keys moved notes instead of embedding
them again, and ends where a fresh index of the final vault does.

Case 33: a write storm from the moment the process is spawned, through the model loading, the
watch being armed, the first reconcile and after it. The watch is armed before the first walk,
so whatever that walk missed is reported as an event; the end state must be the fresh index's.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.convergence import assert_converged
from harness.daemon import RunningDaemon, running, short_socket_dir, start, wait_until, write_config


@dataclass
class Vault:
    """A vault of tiny one-chunk notes, and what each note holds, kept in step with the disk.

    Every text written is new (a counter), and no path is ever used twice, so what must be
    embedded, moved or deleted can be told from the contents alone.
    """

    root: Path
    rng: random.Random
    notes: dict[str, str] = field(default_factory=dict)
    counter: int = 0
    done: dict[str, int] = field(default_factory=dict)
    #: Every change, for the failure message: (time.time(), what, path, new path).
    history: list[tuple[float, str, str, str]] = field(default_factory=list)

    def record(self, what: str, path: str, target: str = "") -> None:
        self.history.append((time.time(), what, path, target))

    def save_history(self, path: Path) -> None:
        """For a failure: each change with its wall-clock time, beside the daemon's log."""
        lines = (f"{at:.3f} {what} {src} {dst}".rstrip() for at, what, src, dst in self.history)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def text(self, title: str) -> str:
        word = self.fresh("w")
        return f"# {title}\n\nA tiny note about {word}, written as number {self.counter}.\n"

    def folders(self) -> list[str]:
        return sorted({p.rpartition("/")[0] for p in self.notes})

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.record("write", rel)
        self.notes[rel] = text

    def add(self) -> None:
        folders = self.folders() or [self.fresh("top")]
        folder = self.rng.choice(folders)
        if self.rng.random() < 0.05:
            folder = f"{folder}/{self.fresh('sub')}"
        name = self.fresh("note-")
        self.write(f"{folder}/{name}.md", self.text(name))

    def edit(self) -> None:
        rel = self.rng.choice(sorted(self.notes))
        title = self.notes[rel].splitlines()[0][2:]  # the same H1, a new body
        self.write(rel, self.text(title))

    def delete(self) -> None:
        rel = self.rng.choice(sorted(self.notes))
        (self.root / rel).unlink()
        self.record("delete", rel)
        del self.notes[rel]

    def rename(self) -> None:
        rel = self.rng.choice(sorted(self.notes))
        target = f"{self.rng.choice(self.folders())}/{self.fresh('moved-')}.md"
        (self.root / target).parent.mkdir(parents=True, exist_ok=True)
        (self.root / rel).rename(self.root / target)
        self.record("rename", rel, target)
        self.notes[target] = self.notes.pop(rel)

    def rename_folder(self) -> None:
        folder = self.rng.choice(self.folders())
        parent = folder.rpartition("/")[0]
        target = f"{parent}/{self.fresh('dir')}" if parent else self.fresh("dir")
        (self.root / folder).rename(self.root / target)
        self.record("rename folder", folder, target)
        prefix = folder + "/"
        for rel in [p for p in self.notes if p.startswith(prefix)]:
            self.notes[target + "/" + rel[len(prefix) :]] = self.notes.pop(rel)

    def change(self) -> None:
        """One random change; the mix keeps the vault at about the same size."""
        roll = self.rng.random()
        if roll < 0.25 or len(self.notes) < 10:
            kind = "add"
        elif roll < 0.50:
            kind = "edit"
        elif roll < 0.70:
            kind = "delete"
        elif roll < 0.96:
            kind = "rename"
        else:
            kind = "rename_folder"
        getattr(self, kind)()
        self.done[kind] = self.done.get(kind, 0) + 1


def seeded(root: Path, notes: int, folders: int, seed: int) -> Vault:
    vault = Vault(root, random.Random(seed))
    for i in range(notes):
        name = vault.fresh("note-")
        vault.write(f"f{i % folders}/{name}.md", vault.text(name))
    return vault


def settled(daemon: RunningDaemon, vault: Vault) -> None:
    """Wait until the daemon has indexed a note written after every other change.

    Idle means nothing known is left to do; events still on their way from the kernel through
    watchdog's queue are not known yet. Events arrive in order, so once this last note is
    searchable every earlier change has been seen.
    """
    name = vault.fresh("last-")
    vault.write(f"{name}.md", vault.text(name))
    daemon.search("x", mode="keyword", wait_for=f"{name}.md")


def status(daemon: RunningDaemon) -> dict[str, Any]:
    answer: dict[str, Any] = daemon.request("GET", "/v1/status")
    return answer


def test_a_thousand_changes_made_while_stopped_converge_and_renames_embed_nothing(
    tmp_path: Path,
) -> None:
    vault = seeded(tmp_path / "vault", notes=300, folders=12, seed=32)
    with running(vault.root, tmp_path) as first:
        first.wait_idle()
        assert status(first)["embedded_total"] == 300
        assert first.stop() == 0, first.log_text()

    before = dict(vault.notes)
    for _ in range(1000):
        vault.change()
    assert vault.done["rename"] > 200 and vault.done["rename_folder"] >= 20, vault.done

    old_texts = set(before.values())
    new_texts = {t for t in vault.notes.values() if t not in old_texts}
    moved = {p for p, t in vault.notes.items() if t in old_texts and p not in before}
    assert len(moved) > 50  # files renamed and notes in renamed folders

    final_texts = set(vault.notes.values())
    deleted = {p for p, t in before.items() if p not in vault.notes and t not in final_texts}

    # The same config, data directory and socket: a restart, not a new index.
    daemon = start(first.config, first.socket, tmp_path / "restart.log")
    try:
        daemon.wait_idle()
        after = status(daemon)
        summary = after["last_reconcile"]
        assert summary["notes_seen"] == len(vault.notes)
        assert summary["notes_moved"] == len(moved)
        assert summary["notes_deleted"] == len(deleted)
        assert summary["notes_changed"] == len(new_texts)
        # One chunk per note: only the texts never seen before are embedded; a renamed note,
        # or one in a renamed folder, keeps its vectors.
        assert after["embedded_total"] == summary["chunks_embedded"] == len(new_texts)
        assert after["notes"] == after["chunks"] == len(vault.notes)
        records = assert_converged(daemon, vault.root, tmp_path)
    finally:
        if daemon.process.poll() is None:
            daemon.stop()
    assert {r["metadata"]["path"] for r in records} == set(vault.notes)


def test_a_write_storm_from_spawn_through_the_first_reconcile_loses_nothing(
    tmp_path: Path,
) -> None:
    vault = seeded(tmp_path / "vault", notes=40, folders=4, seed=33)
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(tmp_path / "vaultd.toml", vault.root, tmp_path / "data", socket)
    ready = threading.Event()
    stop = threading.Event()
    counts = {"before ready": 0, "after ready": 0}
    failure: list[BaseException] = []

    def storm() -> None:
        try:
            while not stop.is_set():
                vault.change()
                counts["after ready" if ready.is_set() else "before ready"] += 1
                time.sleep(vault.rng.uniform(0.002, 0.02))
        except BaseException as exc:  # reported by the test thread
            failure.append(exc)

    writer = threading.Thread(target=storm, name="storm", daemon=True)
    writer.start()  # the storm is already on when the process is spawned
    try:
        daemon = start(config, socket, tmp_path / "vaultd.log")
    except BaseException:
        stop.set()
        raise
    try:
        ready.set()  # the first reconcile is done (health "ok")
        # The storm goes on under the watch alone, for two seconds and 50 changes at least.
        time.sleep(2.0)
        wait_until(
            lambda: counts["after ready"] > 50 or bool(failure), "50 changes under the watch"
        )
        stop.set()
        writer.join(10)
        assert not failure, failure
        # Start-up (imports, the model, the store) takes a second or two: the storm spans it.
        assert counts["before ready"] > 50 and counts["after ready"] > 50, counts
        settled(daemon, vault)
        records = assert_converged(daemon, vault.root, tmp_path)
    finally:
        stop.set()
        vault.save_history(tmp_path / "history.txt")
        if daemon.process.poll() is None:
            daemon.stop()
    assert {r["metadata"]["path"] for r in records} == set(vault.notes)
