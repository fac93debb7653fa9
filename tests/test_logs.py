"""Logs a person and a service manager read: priorities for the journal, ISO 8601 moments,
durations in ms, the note each event concerns, never a line inside a progress bar."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
import structlog

from harness.daemon import PATIENCE, short_socket_dir, start, wait_until
from vaultd.config import LogSection
from vaultd.logs import PRIORITIES, configure, iso, journal_stream, ms, notes

#: A moment as the logs write it.
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
#: What a timestamp as seconds since 1970 looks like, or a duration with too many digits.
RAW_FLOAT = re.compile(r"=\d{9,}\.\d|=\d+\.\d{4,}|: \d+\.\d{4,}")


def tiny_vault(root: Path) -> Path:
    vault = root / "vault"
    vault.mkdir()
    (vault / "Garden.md").write_text("# Garden\n\nCompost, soil and the first seedlings.\n")
    # A binary file named like a note: left out with a warning.
    (vault / "Blob.md").write_bytes(b"x\x00\x81\x82 not text")
    return vault


def index_config(root: Path, vault: Path, log: str = "") -> Path:
    config = root / "vaultd.toml"
    config.write_text(f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n{log}')
    return config


def stream_id(path: Path) -> str:
    """JOURNAL_STREAM's value for a file: `device:inode`, as systemd writes it."""
    found = os.stat(path)
    return f"{found.st_dev}:{found.st_ino}"


def vaultd(*args: str) -> list[str]:
    return [sys.executable, "-m", "vaultd", *args]


# -- the journal -------------------------------------------------------------------------------


def test_under_the_journal_each_line_starts_with_its_priority_and_reads_as_text(
    tmp_path: Path,
) -> None:
    """A real daemon whose stderr is the file JOURNAL_STREAM names, as systemd connects a
    service's stderr to journald: every line carries the priority journald files it under
    (what `journalctl -p warning` filters on), as text without a timestamp (journald stamps
    each line); an edit's event names the note; the health line's moments and lags read."""
    vault = tiny_vault(tmp_path)
    socket = short_socket_dir() / "vaultd.sock"
    config = tmp_path / "vaultd.toml"
    settings = (
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        f'[server]\nsocket = "{socket}"\n[watch]\ndebounce = "100ms"\n'
        '[schedule]\nhealth = "1s"\n[embedding]\nyield_above = 1.0\n'
    )
    config.write_text(settings)
    log = tmp_path / "journal"
    log.touch()
    env = {"JOURNAL_STREAM": stream_id(log)}
    daemon = start(config, socket, log, env=env)
    try:
        (vault / "Garden.md").write_text("# Garden\n\nCompost, soil and tomatoes in June.\n")
        wait_until(lambda: daemon.log_text().count("path=Garden.md") == 2, "the edit is logged")
        # A broken configuration on SIGHUP is an error, and the old one is kept.
        config.write_text(settings + "[nonsense]\n")
        daemon.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "reload failed" in daemon.log_text(), "the failed reload is logged")
        # Settings the index was opened with wait for a restart, and the log says which.
        polling = settings.replace("[watch]\n", '[watch]\nbackend = "polling"\n')
        config.write_text(polling + "[search]\nper_note = 1\n")
        daemon.process.send_signal(signal.SIGHUP)
        wait_until(lambda: "only on restart" in daemon.log_text(), "the restart-only change")
        wait_until(
            lambda: "lag_p50=" in daemon.log_text().rsplit("path=Garden.md", 1)[1],
            "a health line after the edit",
        )
    finally:
        assert daemon.stop() == 0, daemon.log_text()
    lines = [line for line in daemon.log_text().splitlines() if line]
    for line in lines:
        match = re.match(r"<(\d)>(.*)", line)
        assert match, f"no priority: {line!r}"
        priority, text = int(match[1]), match[2]
        assert not text.startswith("{"), f"JSON under the journal: {line!r}"
        assert not ISO.match(text), f"a timestamp journald adds anyway: {line!r}"
        assert not RAW_FLOAT.search(text), f"an unreadable number: {line!r}"
        level = re.match(r"\[(\w+)\] ", text)
        assert level, line
        assert priority == PRIORITIES[level[1]], line
    assert [p for line, p in _by_event(lines, "note left out")] == [4]
    assert {p for line, p in _by_event(lines, "reload failed")} == {3}
    assert {p for line, p in _by_event(lines, "started")} == {6}
    assert [(line.split("sections=")[1], p) for line, p in _by_event(lines, "these sections")] == [
        ("['search', 'watch backend']", 4)
    ]
    edit = [line for line, _ in _by_event(lines, "reconciled") if "path=Garden.md" in line]
    # Durations read as a person reads them (`took=162 ms`), not as whole milliseconds.
    assert edit and "notes_changed=1" in edit[-1] and " took=" in edit[-1], lines
    assert "_ms=" not in edit[-1] and " ms=" not in edit[-1], lines
    health = [line for line, _ in _by_event(lines, "health")][-1]
    assert re.search(r" last_reconcile_at=" + ISO.pattern, health), health
    assert re.search(r" lag_p50=\d+(\.\d)? (ms|s|min) ", health), health


JOURNALD = Path("/lib/systemd/systemd-journald")

#: A journald of its own, in a mount namespace of its own (its sockets and files on tmpfs, the
#: machine's journal untouched), and the commands run as systemd runs a service: stdout and
#: stderr on a journal stream (systemd-cat), JOURNAL_STREAM naming it.
JOURNAL_SCRIPT = """
set -e
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/log && mount -t tmpfs tmpfs /run/log
{journald} >/dev/null 2>&1 &
JOURNALD=$!
trap 'kill $JOURNALD; wait $JOURNALD || true' EXIT
for i in $(seq 200); do [ -S /run/systemd/journal/stdout ] && break; sleep 0.05; done
as_a_service() {{
    systemd-cat -t vaultd sh -c \
        'JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$@"' vaultd "$@" || true
}}
as_a_service {python} -m vaultd index --config {config}
as_a_service {python} -m vaultd index --config {broken}
journalctl -D /run/log/journal -t vaultd -p warning -o cat --no-pager > {warnings}
journalctl -D /run/log/journal -t vaultd -o cat --no-pager > {everything}
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not JOURNALD.exists() or not shutil.which("systemd-cat"),
    reason="a journald of the test's own needs root, systemd-journald and systemd-cat",
)
def test_journalctl_p_warning_shows_exactly_the_warnings_and_errors(tmp_path: Path) -> None:
    """The real journald reads the prefixes: `-p warning` lists a left-out file's warning and
    a command's fatal error, and nothing of the info lines that `-p` omits."""
    vault = tiny_vault(tmp_path)
    broken = tmp_path / "broken.toml"
    broken.write_text("[nonsense]\n")
    warnings, everything = tmp_path / "warnings", tmp_path / "everything"
    script = JOURNAL_SCRIPT.format(
        journald=JOURNALD,
        python=sys.executable,
        config=index_config(tmp_path, vault),
        broken=broken,
        warnings=warnings,
        everything=everything,
    )
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, timeout=PATIENCE
    )
    if done.returncode != 0 and "unshare" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert "] reconciled path=Garden.md" in everything.read_text(), everything.read_text()
    shown = warnings.read_text().splitlines()
    assert len(shown) == 3, shown
    assert shown[0].startswith("[warning] note left out path=Blob.md"), shown
    # The error's two lines: journald files each line on its own, each under its priority.
    assert shown[1].startswith("vaultd: invalid configuration in "), shown
    assert shown[2] == "  - unknown section [nonsense]", shown


def _by_event(lines: list[str], event: str) -> list[tuple[str, int]]:
    return [(line, int(line[1])) for line in lines if f"] {event}" in line]


def test_a_journal_stream_that_is_not_stderr_adds_no_priority(tmp_path: Path) -> None:
    """JOURNAL_STREAM is inherited: run from a service with stderr sent elsewhere (here a
    file), a command must not write the journal's prefixes there. The file gets JSON with
    ISO 8601 moments and durations in ms."""
    vault = tiny_vault(tmp_path)
    config = index_config(tmp_path, vault)
    elsewhere = tmp_path / "other"
    elsewhere.touch()
    env = {**os.environ, "JOURNAL_STREAM": stream_id(elsewhere)}
    done = subprocess.run(
        vaultd("index", "--config", str(config)), capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert not [line for line in done.stderr.splitlines() if line.startswith("<")]
    assert {r["event"] for r in records} >= {"note left out", "reconciled"}, done.stderr
    for record in records:
        assert ISO.fullmatch(record["timestamp"]), record
    (reconciled,) = [r for r in records if r["event"] == "reconciled"]
    assert reconciled["path"] == "Garden.md"
    assert isinstance(reconciled["ms"], int) and "seconds" not in reconciled


def test_json_under_the_journal_keeps_its_timestamp_and_takes_the_prefix(tmp_path: Path) -> None:
    """`format = "json"` for those who parse the journal's messages: each still prefixed."""
    path = tmp_path / "stderr"
    previous = structlog.get_config()
    try:
        with path.open("w") as stream:
            env = {"JOURNAL_STREAM": stream_id(path)}
            assert journal_stream(stream, env) and not journal_stream(stream, {})
            configure(LogSection(level="debug", format="json"), stream=stream, env=env)
            structlog.get_logger("t").warning("careful", path="A.md")
            structlog.get_logger("t").debug("detail")
            configure(LogSection(level="debug", format="auto"), stream=stream, env={})
            structlog.get_logger("t").error("not the journal")
    finally:
        structlog.configure(**previous)
    first, second, third = path.read_text().splitlines()
    assert first.startswith("<4>{") and second.startswith("<7>{")
    assert ISO.fullmatch(json.loads(first[3:])["timestamp"])
    assert json.loads(third)["event"] == "not the journal"


CRASH = """
import logging
from vaultd.config import LogSection
from vaultd.logs import configure
configure(LogSection())
logging.getLogger("chromadb.segment").warning("a library's warning")
logging.getLogger("chromadb.segment").info("a library's chatter")
raise RuntimeError("a bug")
"""


def test_a_library_warning_and_a_crash_carry_their_priority_too(tmp_path: Path) -> None:
    """Standard logging (chromadb, watchdog) and an uncaught exception's traceback would
    otherwise reach the journal as info."""
    path = tmp_path / "stderr"
    path.touch()
    with path.open("ab") as stderr:
        code = subprocess.run(
            [sys.executable, "-c", CRASH],
            stderr=stderr,
            env={**os.environ, "JOURNAL_STREAM": stream_id(path)},
        ).returncode
    assert code == 1
    lines = path.read_text().splitlines()
    assert lines[0] == "<4>[warning] a library's warning [chromadb.segment]", lines
    assert lines[1].startswith("<2>[critical] uncaught exception"), lines
    assert lines[-1] == "<2>RuntimeError: a bug", lines
    assert all(line.startswith("<2>") for line in lines[1:]), lines


def test_durations_read_in_their_unit_on_the_console_and_stay_ms_in_json(tmp_path: Path) -> None:
    """A reconcile of a first index once logged `ms=583029 keyword_ms=276176`: the console
    and the journal now say `took=9.7 min keyword=4.6 min`, JSON keeps the milliseconds."""
    import io

    from vaultd.logs import readable

    assert [readable(v) for v in (583, 1500, 59_949, 583_029, 5_760_000)] == [
        "583 ms",
        "1.5 s",
        "59.9 s",
        "9.7 min",
        "1.6 h",
    ]
    console, text = LogSection(format="console"), io.StringIO()
    try:
        configure(console, stream=text, env={})
        structlog.get_logger().info("reconciled", notes_seen=3, ms=583029, keyword_ms=276176)
        structlog.get_logger().info("health", lag_p50_ms=None, lag_p95_ms=1294)
        shown = text.getvalue()
        assert "reconciled notes_seen=3 took=9.7 min keyword=4.6 min" in shown, shown
        assert "health lag_p50=None lag_p95=1.3 s" in shown, shown
        as_json = io.StringIO()
        configure(LogSection(format="json"), stream=as_json, env={})
        structlog.get_logger().info("reconciled", ms=583029, keyword_ms=276176)
        line = json.loads(as_json.getvalue())
        assert (line["ms"], line["keyword_ms"]) == (583029, 276176), line
    finally:
        configure(LogSection(), env={})


def test_the_field_helpers() -> None:
    assert iso(0) == "1970-01-01T00:00:00.000Z" and iso(None) is None
    assert ms(1.0535167929997442) == 1054 and ms(None) is None
    assert notes([]) == {} and notes({"A.md"}) == {"path": "A.md"}
    many = notes([f"{n}.md" for n in range(9, 0, -1)])
    assert many == {"paths": ["1.md", "2.md", "3.md", "4.md", "5.md"], "more": 4}


# -- the terminal ------------------------------------------------------------------------------


def run_on_terminal(args: list[str], columns: int = 100) -> str:
    """Run a command on a real pseudo-terminal; what it wrote there, as bytes decoded."""
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    out = b""
    deadline = time.monotonic() + PATIENCE
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(parent, 65536)
            except OSError:  # EIO: the child side is closed
                break
            if not data:
                break
            out += data
    finally:
        os.close(parent)
        if process.wait(PATIENCE) != 0:
            raise AssertionError(out.decode(errors="replace"))
    return out.decode(errors="replace")


def screen_lines(output: str) -> list[str]:
    """The lines a terminal shows for `output`: `\\r` goes back to the start of the line and
    what follows overwrites it; colours are dropped."""
    shown = []
    for raw in re.sub(r"\x1b\[[0-9;]*m", "", output).replace("\r\n", "\n").split("\n"):
        line: list[str] = []
        column = 0
        for char in raw:
            if char == "\r":
                column = 0
                continue
            if column < len(line):
                line[column] = char
            else:
                line.append(char)
            column += 1
        shown.append("".join(line).rstrip())
    return shown


def test_log_lines_never_land_inside_the_progress_bar(tmp_path: Path) -> None:
    """On a terminal, a log line written while a bar is drawn (the warning for a left-out
    file, the event at the end of the pass) gets a line of its own, with its time."""
    vault = tiny_vault(tmp_path)
    config = index_config(tmp_path, vault)
    shown = screen_lines(run_on_terminal(vaultd("index", "--config", str(config))))
    logged = [line for line in shown if "note left out" in line or "] reconciled" in line]
    assert len(logged) == 2, shown
    for line in logged:
        assert ISO.match(line) and "%|" not in line, shown
    assert any("embedding: 100%|" in line for line in shown), shown


def test_quiet_index_prints_only_errors(tmp_path: Path) -> None:
    vault = tiny_vault(tmp_path)
    config = index_config(tmp_path, vault)
    done = subprocess.run(
        vaultd("index", "-q", "--config", str(config)), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "reconciled" not in done.stderr and "note left out" not in done.stderr, done.stderr
    assert done.stdout.startswith("2 notes: 1 new or changed")
