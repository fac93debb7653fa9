"""A data directory vaultd cannot write: `vaultd run` stops for good (78), doctor says why.

The read-only cases mount a real read-only tmpfs (they need root, and skip without it); the
other case puts a file where the data directory should be, which refuses root as well.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.daemon import short_socket_dir, write_config
from harness.vaults import write_vault
from vaultd.doctor.checks import diagnose

ROOT = Path(__file__).resolve().parents[1]


def mount(*args: str) -> str:
    """Run mount(8); empty when it worked, else why not."""
    try:
        done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@pytest.fixture
def read_only_mount() -> Iterator[Path]:
    """A tmpfs holding an empty `data/` directory, remounted read-only."""
    target = Path(tempfile.mkdtemp(prefix="vd-ro-"))
    why = mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))
    if why:
        target.rmdir()
        pytest.skip(f"cannot mount a tmpfs here ({why})")
    try:
        (target / "data").mkdir()
        why = mount("-o", "remount,ro", str(target))
        if why:
            pytest.skip(f"cannot remount the tmpfs read-only ({why})")
        assert os.statvfs(target).f_flag & os.ST_RDONLY
        yield target
    finally:
        subprocess.run(["umount", "--lazy", str(target)], check=True)
        target.rmdir()


@pytest.fixture
def sockets() -> Iterator[Path]:
    directory = short_socket_dir()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run_once(config: Path) -> subprocess.CompletedProcess[str]:
    """`vaultd run` as a service manager starts it, expected to stop at once."""
    return subprocess.run(
        [sys.executable, "-m", "vaultd", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "VAULTD_CONFIG": ""},
    )


def restart_prevented() -> set[int]:
    text = (ROOT / "vaultd" / "resources" / "vaultd.service").read_text(encoding="utf-8")
    match = re.search(r"^RestartPreventExitStatus=(.*)$", text, re.MULTILINE)
    assert match, "the unit has no RestartPreventExitStatus"
    return {int(code) for code in match[1].split()}


@pytest.mark.parametrize("store", ["data", "sub/data"])
def test_run_on_a_read_only_data_directory_exits_78_and_says_what_to_do(
    tmp_path: Path, read_only_mount: Path, sockets: Path, store: str
) -> None:
    # "data" exists on the mount; "sub/data" must be created there.
    vault = write_vault(tmp_path / "vault")
    config = write_config(tmp_path / "c.toml", vault, read_only_mount / store, sockets / "v.sock")
    result = run_once(config)
    assert result.returncode == 78, result.stderr
    assert 78 in restart_prevented()  # so systemd does not start it again and again
    assert "read-only file system" in result.stderr
    assert "set [store] path to a directory on a writable disk" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_with_a_file_where_the_data_directory_goes_exits_78(
    tmp_path: Path, sockets: Path
) -> None:
    vault = write_vault(tmp_path / "vault")
    (tmp_path / "taken").write_text("not a directory")
    config = write_config(tmp_path / "c.toml", vault, tmp_path / "taken" / "data", sockets / "s")
    result = run_once(config)
    assert result.returncode == 78, result.stderr
    assert "a file stands where a directory must be" in result.stderr
    assert "[store] path" in result.stderr


@pytest.mark.parametrize("store", ["data", "sub/data"])
def test_doctor_on_a_read_only_mount_says_so_and_never_suggests_chown(
    tmp_path: Path, read_only_mount: Path, sockets: Path, store: str
) -> None:
    vault = write_vault(tmp_path / "vault")
    config = write_config(tmp_path / "c.toml", vault, read_only_mount / store, sockets / "v.sock")
    report = diagnose(config, None, {**os.environ, "VAULTD_CONFIG": ""})
    found = report.by_name("store")
    assert found.status == "fail"
    assert "read-only file system" in found.message
    assert "[store] path" in found.remedy
    for check in report.checks:
        assert "chown" not in check.remedy and "chmod" not in check.remedy, check
    assert not report.ok
