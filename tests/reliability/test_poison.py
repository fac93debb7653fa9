"""Case 30: a poison note, one that crashes the parser or the embedder every time.

It is quarantined after K tries on the same content (the list lives in the manifest), the
daemon stops dying, the rest of the vault is indexed, and the quarantine holds until the note
changes or the user asks for it by name.

The faults are injected with vaultd's test fault hooks (`vaultd/faults.py`): a real native
crash cannot be produced on demand, and the hooks end the process the same way (no clean-up).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harness.convergence import Records, assert_converged, assert_same, export_of, fresh_export
from harness.daemon import PATIENCE, RunningDaemon, running, short_socket_dir, start, write_config
from vaultd.cli.commands import main
from vaultd.config import QUARANTINE_AFTER, load_config
from vaultd.errors import VaultdError
from vaultd.faults import CRASH_ON, CRASH_SIGNAL, EMBED_FAIL_ON, PARSE_FAIL_ON
from vaultd.index.open import open_index
from vaultd.layout import MANIFEST as FILE_NAME
from vaultd.storage.manifest import Manifest
from vaultd.storage.schema import SCHEMA_VERSION

K = QUARANTINE_AFTER
#: How Popen reports a process the fault hook killed.
CRASHED = -CRASH_SIGNAL
MARKER = "qqpoisonqq"
#: One word only each note holds, to find it by keyword search.
WORDS = {
    "a.md": "albatross",
    "b.md": "buttercup",
    "c.md": "cormorant",
    "d.md": "dandelion",
    "e.md": "eucalyptus",
    "f.md": "flamingo",
}


def make_vault(root: Path, poison: str, marker: str = MARKER) -> Path:
    """Six tiny notes; `poison` holds `marker` (none does when `marker` is empty)."""
    vault = root / "vault"
    vault.mkdir()
    for name, word in WORDS.items():
        extra = f" {marker}" if name == poison and marker else ""
        (vault / name).write_text(f"# {word.title()}\n\nA note about the {word}{extra}.\n")
    return vault


def found(daemon: RunningDaemon, word: str) -> set[str]:
    return {h["path"] for h in daemon.search(word, mode="keyword", k=5)}


def start_like_systemd(
    config: Path, socket: Path, log: Path, env: dict[str, str], limit: int = 6
) -> tuple[RunningDaemon, list[int]]:
    """Start `vaultd run` until it stays up, as `Restart=on-failure` would; return the daemon
    and the exit codes of the runs that died before they were ready."""
    codes: list[int] = []
    for _ in range(limit):
        try:
            return start(config, socket, log, env=env), codes
        except RuntimeError as exc:
            died = re.search(r"exited with (-?\d+)", str(exc))
            assert died, str(exc)
            codes.append(int(died[1]))
    raise AssertionError(f"still dying after {limit} starts: {codes}")


def reference(
    vault: Path, workdir: Path, poison: str, last_good: tuple[bytes, int] | None
) -> Records:
    """A fresh index of the vault as the index should see it: the poison note's new content
    never got in, so it is either absent or back to its last good bytes and mtime (the store
    records the mtime)."""
    copy = workdir / "reference-vault"
    shutil.copytree(vault, copy)  # copies mtimes too
    if last_good is None:
        (copy / poison).unlink()
    else:
        data, mtime_ns = last_good
        (copy / poison).write_bytes(data)
        os.utime(copy / poison, ns=(mtime_ns, mtime_ns))
    return fresh_export(copy, workdir / "reference")


def quarantined(daemon: RunningDaemon) -> list[dict[str, Any]]:
    held: list[dict[str, Any]] = daemon.request("GET", "/v1/status")["quarantined"]
    return held


def rescan(daemon: RunningDaemon, paths: list[str] | None = None) -> None:
    daemon.request("POST", "/v1/reindex", {"paths": paths} if paths else {})
    daemon.wait_idle()


def test_a_note_that_crashes_the_process_is_quarantined_and_the_rest_indexed(
    tmp_path: Path,
) -> None:
    vault = make_vault(tmp_path, "c.md")
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", socket)
    daemon, codes = start_like_systemd(config, socket, tmp_path / "vaultd.log", {CRASH_ON: MARKER})
    try:
        # Run 1 died with a, b and c in hand (one crash each); run 2 indexed the rest, then
        # retried a, b and c one at a time and died on c alone; run 3 died on c again; run 4
        # counted the third crash and quarantined c before it could die again.
        assert codes == [CRASHED] * K
        [held] = quarantined(daemon)
        assert held["path"] == "c.md"
        assert held["reason"] == f"crashed the indexer {K} times"
        assert held["attempts"] == K and held["since"] <= time.time()
        status = daemon.request("GET", "/v1/status")
        assert status["failed"] == [] and status["notes"] == 5
        for name, word in WORDS.items():
            assert found(daemon, word) == (set() if name == "c.md" else {name})
        # Rescans leave it alone: the daemon stays up and the count stays at K.
        rescan(daemon)
        rescan(daemon)
        assert daemon.process.poll() is None
        assert quarantined(daemon)[0]["attempts"] == K
        shown = CliRunner().invoke(main, ["status", "--config", str(config)])
        assert shown.exit_code == 1, shown.output
        assert f"quarantined: c.md: crashed the indexer {K} times ({K} attempts, since" in (
            shown.output
        )
        assert "the last run died while indexing these notes" in daemon.log_text()
        daemon.wait_idle()
        assert daemon.stop() == 0
    finally:
        daemon.stop()
    assert_same(export_of(config), reference(vault, tmp_path, "c.md", None))


def test_an_edit_that_crashes_the_process_keeps_the_last_good_version(tmp_path: Path) -> None:
    vault = make_vault(tmp_path, "c.md", marker="")
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", socket)
    log = tmp_path / "vaultd.log"
    env = {CRASH_ON: MARKER}
    daemon = start(config, socket, log, env=env)
    poison = vault / "c.md"
    last_good = (poison.read_bytes(), poison.stat().st_mtime_ns)
    poison.write_text(f"# Cormorant\n\nRewritten: {MARKER} and a pelican.\n")
    # The watcher hands the edit over; parsing it ends the process.
    assert daemon.process.wait(PATIENCE) == CRASHED
    daemon, codes = start_like_systemd(config, socket, log, env)
    try:
        assert codes == [CRASHED] * (K - 1)
        [held] = quarantined(daemon)
        assert (held["path"], held["attempts"]) == ("c.md", K)
        # Its last good chunks stay searchable; the new text never got in.
        assert found(daemon, "cormorant") == {"c.md"}
        assert found(daemon, "pelican") == set()
        for name, word in WORDS.items():
            assert found(daemon, word) == {name}
        # Asked for by name, it gets exactly one more try: one more crash, then held again.
        with contextlib.suppress(VaultdError):  # the crash it asks for may cut the answer off
            daemon.request("POST", "/v1/reindex", {"paths": ["c.md"]})
        assert daemon.process.wait(PATIENCE) == CRASHED
        daemon, codes = start_like_systemd(config, socket, log, env)
        assert codes == []
        [held] = quarantined(daemon)
        assert (held["attempts"], held["reason"]) == (K + 1, f"crashed the indexer {K + 1} times")
        daemon.wait_idle()
        assert daemon.stop() == 0
    finally:
        daemon.stop()
    assert_same(export_of(config), reference(vault, tmp_path, "c.md", last_good))


def test_a_note_the_embedder_rejects_is_quarantined_until_it_changes(tmp_path: Path) -> None:
    vault = make_vault(tmp_path, "e.md")
    with running(vault, tmp_path, env={EMBED_FAIL_ON: MARKER}) as daemon:
        # The first pass was attempt 1; each full rescan is one more, until the K-th.
        for attempt in range(1, K):
            [failed] = daemon.request("GET", "/v1/status")["failed"]
            assert (failed["path"], failed["attempts"]) == ("e.md", attempt)
            assert quarantined(daemon) == []
            rescan(daemon)
        status = daemon.request("GET", "/v1/status")
        assert status["failed"] == []
        [held] = status["quarantined"]
        assert (held["path"], held["attempts"]) == ("e.md", K)
        assert "test fault hook" in held["reason"]
        # Not retried: by rescans, nor by a touch (same content).
        rescan(daemon)
        os.utime(vault / "e.md")
        time.sleep(0.5)
        rescan(daemon)
        assert quarantined(daemon)[0]["attempts"] == K
        # Its text is searchable by its words (the keyword phase recorded it), marked as not
        # indexed: the store holds no vector of it.
        for name, word in WORDS.items():
            assert found(daemon, word) == {name}
        [hit] = [
            h for h in daemon.search(WORDS["e.md"], k=3, mode="keyword") if h["path"] == "e.md"
        ]
        assert hit["indexed"] is False and "vector" not in hit.get("explain", {})
        # Asked for by name: one more try, which fails, and it is held again at once.
        rescan(daemon, ["e.md"])
        assert quarantined(daemon)[0]["attempts"] == K + 1
        # A new content is a new start.
        (vault / "e.md").write_text("# Eucalyptus\n\nA note about the eucalyptus, fixed.\n")
        daemon.search("eucalyptus", wait_for="e.md")
        status = daemon.request("GET", "/v1/status")
        assert status["quarantined"] == [] and status["failed"] == []
        assert found(daemon, "eucalyptus") == {"e.md"}
        assert_converged(daemon, vault, tmp_path)


def test_a_note_the_parser_rejects_is_quarantined_without_a_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI path: `vaultd index` runs, `vaultd status` reads the manifest directly."""
    monkeypatch.setenv(PARSE_FAIL_ON, MARKER)
    vault = make_vault(tmp_path, "b.md")
    config_path = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s"
    )
    config = load_config(config_path, env={})
    with open_index(config, env={}) as index:
        for _ in range(K):
            assert index.indexer.reconcile().notes_failed == 1
        # Quarantined now: not even read as a failure any more.
        assert index.indexer.reconcile().notes_failed == 0
        [held] = index.manifest.failures.quarantined()
        assert (held.path, held.attempts) == ("b.md", K) and "test fault hook" in held.reason
        assert index.manifest.failures.failed() == []
        index.indexer.retry(["b.md"])
        assert index.indexer.reconcile().notes_failed == 1
        assert index.manifest.failures.quarantined()[0].attempts == K + 1
    shown = CliRunner().invoke(main, ["status", "--config", str(config_path)])
    assert shown.exit_code == 1, shown.output
    assert "quarantined: b.md: " in shown.output
    assert f"({K + 1} attempts, since" in shown.output


def test_a_binary_note_is_left_out_never_quarantined_and_status_says_so(tmp_path: Path) -> None:
    """Not a note vaultd can index: no failure, no quarantine, listed as left out."""
    vault = make_vault(tmp_path, "", marker="")
    (vault / "binary.md").write_bytes(b"\x00\x01\x02 not text")
    config_path = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s"
    )
    config = load_config(config_path, env={})
    with open_index(config, env={}) as index:
        for _ in range(K + 1):
            summary = index.indexer.reconcile()
            assert (summary.notes_failed, summary.notes_left_out) == (0, 1)
        assert (
            index.manifest.failures.quarantined() == [] and index.manifest.failures.failed() == []
        )
    shown = CliRunner().invoke(main, ["status", "--config", str(config_path)])
    assert shown.exit_code == 0, shown.output
    assert f"indexed:  {len(WORDS)} notes ({len(WORDS)} files" in shown.output
    assert "1 left out" in shown.output
    assert "left out: binary.md: binary content (NUL bytes)" in shown.output
    shown = CliRunner().invoke(main, ["status", "--json", "--config", str(config_path)])
    [entry] = json.loads(shown.stdout)["left_out"]
    assert (entry["path"], entry["kind"]) == ("binary.md", "binary")


class Abandoned(Exception):
    """What the daemon's worker raises at a pause point to stop gracefully."""


def test_a_pass_abandoned_mid_batch_counts_no_attempt(tmp_path: Path) -> None:
    """A graceful stop is not a crash: the notes in hand are not held against."""
    vault = make_vault(tmp_path, "", marker="")
    config_path = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s"
    )
    config = load_config(config_path, env={})
    with open_index(config, env={}) as index:
        index.embedder.batch_size = 1  # a pause point between every two chunks

        def stop(in_flight: frozenset[str]) -> None:
            if in_flight:
                assert index.manifest.failures.in_flight() == sorted(in_flight)
                raise Abandoned

        with pytest.raises(Abandoned):
            index.indexer.reconcile(pause=stop)
        assert index.manifest.failures.in_flight() == []
    with open_index(config, env={}) as index:
        assert index.indexer.reconcile().notes_failed == 0
        counts = index.manifest.counts()
        assert (counts["notes"], counts["failed"], counts["quarantined"]) == (len(WORDS), 0, 0)


def test_a_schema_3_manifest_opens_and_keeps_its_vectors(tmp_path: Path) -> None:
    vault = make_vault(tmp_path, "", marker="")
    config_path = write_config(
        tmp_path / "vaultd.toml", vault, tmp_path / "data", short_socket_dir() / "s"
    )
    config = load_config(config_path, env={})
    with open_index(config, env={}) as index:
        index.indexer.reconcile()
    before = export_of(config_path)
    # Schema 3 is schema 6 without the in-flight and suspects tables and the left_out and
    # crashes columns; schema 6 had trigrams where 7 has pairs (the migration drops whichever
    # is there and fills the pairs from the chunks); schema 9 added the notes' ctime_ns, inode
    # and hashed_ns.
    db = sqlite3.connect(tmp_path / "data" / FILE_NAME)
    db.executescript(
        "DROP TABLE in_flight; DROP TABLE suspects; ALTER TABLE notes DROP COLUMN left_out; "
        "ALTER TABLE notes DROP COLUMN crashes; ALTER TABLE notes DROP COLUMN ctime_ns; "
        "ALTER TABLE notes DROP COLUMN inode; ALTER TABLE notes DROP COLUMN hashed_ns; "
        "PRAGMA user_version = 3;"
    )
    vectors = db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
    db.close()
    assert vectors == len(before) > 0
    with open_index(config, env={}) as index:
        summary = index.indexer.reconcile()
        # Schema 9 added the stat fields a note is trusted by: each is read once, unchanged.
        assert summary.chunks_embedded == 0 and summary.notes_changed == 0
        assert summary.notes_read == len(WORDS)
        assert index.manifest.failures.in_flight() == []
    db = sqlite3.connect(tmp_path / "data" / FILE_NAME)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 11
    assert "left_out" in {r[1] for r in db.execute("PRAGMA table_info(notes)")}
    assert db.execute("SELECT COUNT(*) FROM vectors").fetchone()[0] == vectors
    db.close()
    assert_same(export_of(config_path), before)


def test_a_schema_5_manifest_keeps_the_crash_count_it_wrote_into_a_reason(tmp_path: Path) -> None:
    """Before schema 6 a crash count lived only in the reason text; the migration reads it
    out once into the crashes column, which later crashes count on from."""
    Manifest(tmp_path).close()
    db = sqlite3.connect(tmp_path / FILE_NAME)
    db.executescript(
        "ALTER TABLE notes DROP COLUMN crashes; PRAGMA user_version = 5;"
        "INSERT INTO notes(path, size, mtime_ns, sha256, status, error, attempts, indexed_at) "
        "VALUES ('c.md', 1, 1, 'h', 'quarantined', 'crashed the indexer 3 times', 3, 0),"
        "       ('f.md', 1, 1, 'h', 'failed', 'cannot parse', 2, 0);"
    )
    db.close()
    Manifest(tmp_path).close()
    db = sqlite3.connect(tmp_path / FILE_NAME)
    rows = dict(db.execute("SELECT path, crashes FROM notes").fetchall())
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    assert rows == {"c.md": 3, "f.md": 0}
