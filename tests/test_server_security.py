"""The socket's safety: permissions, other users, unsafe paths, and clients that misbehave.

One daemon, started under `umask 000`, serves the module; the refusal cases start their own
`vaultd run` processes in parallel, each failing fast before it serves anything. The tests that
wait out HEADER_TIMEOUT or IDLE_TIMEOUT run their slow clients side by side to stay short.
"""

from __future__ import annotations

import errno
import json
import os
import re
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.daemon import RunningDaemon, short_socket_dir, start, wait_until, write_config
from harness.vaults import write_vault
from tests.test_server import (
    Reply,
    assert_error,
    call,
    exchange,
    parse,
    post,
    start_daemon,
    vaultd,
)
from vaultd.api.limits import MAX_WAIT
from vaultd.api.locate import MAX_SOCKET_PATH, socket_path
from vaultd.api.server import (
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
    _clear_stale,
    _safe_directory,
)
from vaultd.errors import StartupError, TrustError

NOBODY = 65534
#: Slack for scheduling and the test's own polling on top of the server's timeouts.
MARGIN = 3.0


@dataclass
class Guarded:
    """The module's daemon; `daemon` is replaced when a test restarts it."""

    daemon: RunningDaemon
    vault: Path
    workdir: Path
    runtime: Path
    spares: list[RunningDaemon] = field(default_factory=list)

    @property
    def sock(self) -> Path:
        return self.daemon.socket

    def health(self) -> Reply:
        return call(self.sock, "GET", "/v1/health", timeout=10)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    work = tmp_path_factory.mktemp("security")
    vault = write_vault(work / "vault")
    runtime = short_socket_dir()
    old = os.umask(0)  # inherited by `vaultd run`: the worst umask a user could have
    try:
        daemon = start_daemon(vault, work, runtime)
    finally:
        os.umask(old)
    state = Guarded(daemon, vault, work, runtime)
    try:
        yield state
    finally:
        for running in [state.daemon, *state.spares]:
            if running.process.poll() is None:
                running.stop()
        shutil.rmtree(runtime, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_socket_is_0600_in_a_0700_directory_under_umask_000(guarded: Guarded) -> None:
    assert guarded.sock == guarded.runtime / "vaultd" / "vaultd.sock"
    assert stat.S_ISSOCK(guarded.sock.lstat().st_mode)
    assert mode(guarded.sock) == 0o600
    assert mode(guarded.sock.parent) == 0o700
    assert guarded.sock.lstat().st_uid == os.getuid()
    assert guarded.health().body["status"] == "ok"


# -- unsafe places for the socket: `vaultd run` refuses to start ---------------------------------


@dataclass
class Refusal:
    socket: Path
    message: str
    #: TrustError's for a directory another user owns or may write; StartupError's otherwise.
    code: int = StartupError.exit_code
    result: subprocess.CompletedProcess[str] | None = None


def _refusal_cases(base: Path) -> dict[str, Refusal]:
    world = base / "world"
    world.mkdir()
    world.chmod(0o777)
    cases = {
        "world_writable": Refusal(
            world / "vaultd.sock", "is writable by every user", TrustError.exit_code
        )
    }
    if os.getuid() == 0:
        foreign = base / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, NOBODY, NOBODY)
        cases["foreign_owner"] = Refusal(
            foreign / "vaultd.sock", f"belongs to uid {NOBODY}", TrustError.exit_code
        )
    long_dir = base / ("d" * (MAX_SOCKET_PATH - len(str(base))))
    cases["too_long"] = Refusal(long_dir / "vaultd.sock", f"fewer than {MAX_SOCKET_PATH}")
    return cases


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Refusal]:
    """The unsafe cases started at once; each `vaultd run` must exit with a clear message."""
    work = tmp_path_factory.mktemp("refusals")
    vault = write_vault(work / "vault")
    base = short_socket_dir()
    cases = _refusal_cases(base)
    processes = {}
    try:
        for name, case in cases.items():
            (work / name).mkdir()
            config = write_config(
                work / name / "vaultd.toml", vault, work / name / "data", case.socket
            )
            processes[name] = subprocess.Popen(
                [sys.executable, "-m", "vaultd", "run", "--config", str(config)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        for name, process in processes.items():
            out, _ = process.communicate(timeout=120)
            cases[name].result = subprocess.CompletedProcess(process.args, process.returncode, out)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        shutil.rmtree(base, ignore_errors=True)
    return cases


@pytest.mark.parametrize("case", ["world_writable", "foreign_owner", "too_long"])
def test_vaultd_run_refuses_an_unsafe_socket_path(refusals: dict[str, Refusal], case: str) -> None:
    if case not in refusals:
        pytest.skip("chown to another uid needs root; this test runs as an ordinary user")
    refusal = refusals[case]
    result = refusal.result
    assert result is not None
    assert result.returncode == refusal.code, result.stdout
    assert refusal.message in result.stdout, result.stdout
    assert "vaultd: " in result.stdout
    assert not refusal.socket.exists()


@pytest.mark.parametrize("bits", [0o777, 0o775, 0o770, 0o720, 0o702])
def test_a_directory_others_can_write_is_refused(tmp_path: Path, bits: int) -> None:
    directory = tmp_path / "sockets"
    directory.mkdir()
    directory.chmod(bits)
    with pytest.raises(StartupError, match="writable by others"):
        _safe_directory(directory)


@pytest.mark.parametrize("bits", [0o700, 0o711, 0o755])
def test_a_directory_only_we_can_write_is_accepted(tmp_path: Path, bits: int) -> None:
    directory = tmp_path / "sockets"
    directory.mkdir()
    directory.chmod(bits)
    _safe_directory(directory)


def test_missing_parent_directories_are_created_private_under_umask_000(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        _safe_directory(tmp_path / "run" / "user" / "vaultd")
    finally:
        os.umask(old)
    for directory in ("run", "run/user", "run/user/vaultd"):
        assert mode(tmp_path / directory) == 0o700, directory


def test_socket_path_length_limit(tmp_path: Path) -> None:
    short = "/tmp/" + "s" * (MAX_SOCKET_PATH - 6)  # 103 bytes: fits with its NUL
    assert socket_path(short, {}, tmp_path) == Path(short)
    with pytest.raises(StartupError, match="104"):
        socket_path(short + "s", {}, tmp_path)
    with pytest.raises(StartupError, match="bytes"):  # counted in bytes, not characters
        socket_path("/tmp/" + "ü" * 50, {}, tmp_path)


def test_a_file_that_is_not_a_socket_is_never_removed(tmp_path: Path) -> None:
    path = tmp_path / "vaultd.sock"
    path.write_text("mine")
    with pytest.raises(StartupError, match="is not a socket"):
        _clear_stale(path)
    assert path.read_text() == "mine"


def test_a_live_socket_is_never_removed(guarded: Guarded) -> None:
    inode = guarded.sock.lstat().st_ino
    with pytest.raises(StartupError, match="already serving"):
        _clear_stale(guarded.sock)
    assert guarded.sock.lstat().st_ino == inode
    assert guarded.health().body["status"] == "ok"


def test_a_second_daemon_on_the_same_data_directory_leaves_the_socket_alone(
    guarded: Guarded,
) -> None:
    """The stale-socket check runs only under the data-directory lock: no lock, no touching."""
    inode = guarded.sock.lstat().st_ino
    result = subprocess.run(
        [sys.executable, "-m", "vaultd", "run", "--config", str(guarded.daemon.config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "another vaultd process" in result.stderr
    assert guarded.sock.lstat().st_ino == inode
    assert guarded.health().body["status"] == "ok"


# -- another user --------------------------------------------------------------------------------

CLIENT = """
import json, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.settimeout(10)
try:
    conn.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"stage": "connect", "errno": exc.errno})); sys.exit()
try:
    conn.sendall(b"GET /v1/status HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n")
    data = conn.recv(65536)
except OSError as exc:
    print(json.dumps({"stage": "exchange", "errno": exc.errno})); sys.exit()
print(json.dumps({"stage": "answer", "data": data.decode("latin-1")}))
"""


def as_nobody() -> list[str]:
    """The command prefix that runs a Python client as `nobody`, or a skip saying why not."""
    if os.getuid() != 0:
        pytest.skip("running a client as another user needs root; this test runs unprivileged")
    if shutil.which("setpriv"):
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    elif shutil.which("runuser"):
        prefix = ["runuser", "-u", "nobody", "--"]
    else:
        pytest.skip("neither setpriv nor runuser is installed to run a client as nobody")
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(
            [*prefix, python, "-I", "-c", "import os; print(os.getuid())"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == str(NOBODY):
            return [*prefix, python, "-I"]
    pytest.skip("no Python interpreter that the nobody user may run")


def nobody_client(sock: Path) -> dict[str, object]:
    result = subprocess.run(
        [*as_nobody(), "-c", CLIENT, str(sock)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    outcome: dict[str, object] = json.loads(result.stdout)
    return outcome


def test_another_user_cannot_even_reach_the_socket(guarded: Guarded) -> None:
    outcome = nobody_client(guarded.sock)
    assert outcome == {"stage": "connect", "errno": errno.EACCES}  # the directory is 0700


def test_another_user_is_refused_by_peer_credentials(guarded: Guarded) -> None:
    """With the file permissions opened up, SO_PEERCRED still turns the other uid away."""
    prefix = as_nobody()  # skip before changing anything
    assert prefix
    directories = [guarded.runtime, guarded.sock.parent]
    try:
        for directory in directories:
            directory.chmod(0o711)
        guarded.sock.chmod(0o666)
        outcome = nobody_client(guarded.sock)
    finally:
        guarded.sock.chmod(0o600)
        for directory in directories:
            directory.chmod(0o700)
    # Disconnected without a byte of response (a reset is a disconnect too).
    assert outcome in (
        {"stage": "answer", "data": ""},
        {"stage": "exchange", "errno": errno.EPIPE},
        {"stage": "exchange", "errno": errno.ECONNRESET},
    )
    wait_until(
        lambda: "refused a connection from another user" in guarded.daemon.log_text(),
        "the refusal is logged",
    )
    refusal = [
        json.loads(line)
        for line in guarded.daemon.log_text().splitlines()
        if "refused a connection from another user" in line
    ]
    assert refusal[-1]["uid"] == NOBODY
    assert guarded.health().body["status"] == "ok"


# -- malformed and oversized requests ------------------------------------------------------------


def raw_reply(sock: Path, data: bytes) -> Reply:
    return parse(exchange(sock, data))


SEARCH_BODY = b'{"query": "garden"}'  # 19 bytes


def _search_with_length(*lengths: bytes) -> bytes:
    """A valid search, with these Content-Length headers, each as written."""
    head = b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    fields = b"".join(b"Content-Length: " + n + b"\r\n" for n in lengths)
    return head + fields + b"\r\n" + SEARCH_BODY


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET\r\n\r\n", 400),
        (b"POST /v1/search\r\n\r\n", 400),  # HTTP/0.9 had only GET
        (b"GET /v1/health HTTP/1.1 extra words\r\n\r\n", 400),
        (b"GET /v1/health HTTX/1.1\r\n\r\n", 400),
        (b"GET /v1/health HTTP/2.0\r\nHost: x\r\n\r\n", 400),
        (b"GET /v1/health HTTP/3.0\r\nHost: x\r\n\r\n", 400),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),  # an HTTP/2 connection preface
        (b"GET /v1/health HTTP/0.9\r\nHost: x\r\n\r\n", 400),
        (b"GET /v1/health HTTP/1.1.1\r\n\r\n", 400),
        (b"G(T /v1/health HTTP/1.1\r\n\r\n", 400),
        (b"POST /v1/search HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
        (b"POST /v1/search HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400),
        # Lengths int() would take (and answer 200 for), or that another parser reads otherwise.
        (_search_with_length(b"+19"), 400),
        (_search_with_length(b" 19 "), 400),
        (_search_with_length(b"0_19"), 400),
        (_search_with_length(b"19,19"), 400),
        (_search_with_length(b"9" * 5000), 413),
        (b"POST /v1/search HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}", 400),  # ends early
        (
            b"POST /v1/search HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            411,
        ),
        (b"POST /v1/search HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\n", 413),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n", 431),
        (b"GET /v1/health HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 200 + b"\r\n", 431),
    ],
    ids=[
        "garbage",
        "no-target",
        "http-0.9-post",
        "too-many-words",
        "bad-protocol",
        "http-2",
        "http-3",
        "http-2-preface",
        "http-0.9-with-version",
        "garbled-version",
        "not-a-method",
        "bad-length",
        "negative-length",
        "signed-length",
        "spaced-length",
        "underscored-length",
        "listed-length",
        "thousands-of-digits-length",
        "short-body",
        "chunked",
        "huge-length",
        "long-request-line",
        "long-header",
        "many-headers",
    ],
)
def test_malformed_requests_get_json_errors(
    guarded: Guarded, request_bytes: bytes, status: int
) -> None:
    reply = raw_reply(guarded.sock, request_bytes)
    assert_error(reply, status)
    assert reply.headers.get("connection") == "close"


def test_body_over_the_limit_is_413_and_the_daemon_is_unaffected(guarded: Guarded) -> None:
    body = b'{"query": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    reply = raw_reply(
        guarded.sock,
        b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body,
    )
    assert_error(reply, 413, "too_large")
    assert guarded.health().body["status"] == "ok"


@pytest.mark.parametrize(
    ("method", "target", "allow"),
    [
        (b"OPTIONS", b"/v1/health", "GET"),
        (b"OPTIONS", b"/v1/search", "POST"),
        (b"OPTIONS", b"/v1/notes/Garden/Compost.md", "GET"),
        (b"BREW", b"/v1/status", "GET"),
        (b"TRACE", b"/v1/reindex", "POST"),
        (b"PUT", b"/v1/search", "POST"),
        (b"get", b"/openapi.json", "GET"),  # methods are case-sensitive
    ],
)
def test_a_method_a_route_does_not_take_is_405_with_allow(
    guarded: Guarded, method: bytes, target: bytes, allow: str
) -> None:
    reply = raw_reply(guarded.sock, method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert_error(reply, 405, "method_not_allowed")
    assert reply.headers["allow"] == allow


@pytest.mark.parametrize("method", [b"OPTIONS", b"HEAD", b"BREW"])
def test_any_method_on_an_unknown_route_is_404(guarded: Guarded, method: bytes) -> None:
    raw = exchange(guarded.sock, method + b" /v2/nothing HTTP/1.1\r\nHost: x\r\n\r\n")
    head = raw.partition(b"\r\n\r\n")[0].decode("latin-1")
    assert head.startswith("HTTP/1.1 404 "), raw[:300]
    if method != b"HEAD":
        assert_error(parse(raw), 404, "not_found")


def _responses(raw: bytes) -> list[bytes]:
    return re.findall(rb"HTTP/1\.[01] \d{3} [^\r]*\r\n", raw)


def test_head_is_405_without_a_body_and_the_connection_stays_usable(guarded: Guarded) -> None:
    raw = exchange(
        guarded.sock,
        b"HEAD /v1/health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 405 "), raw[:300]
    assert b"\r\nAllow: GET\r\n" in first + b"\r\n"
    assert b"\r\nContent-Length: " in first
    # No body after a HEAD answer's headers: the next bytes are the next answer.
    second = parse(rest)
    assert second.status == 200
    assert second.body["status"] == "ok"


@pytest.mark.parametrize(
    "lengths",
    [(b"19", b"19"), (b"19", b"2"), (b"2", b"19"), (b"19", b"0")],
    ids=["equal", "larger-first", "smaller-first", "zero-second"],
)
def test_two_content_lengths_are_refused_and_the_connection_closed(
    guarded: Guarded, lengths: tuple[bytes, bytes]
) -> None:
    # What follows the body would be a second, smuggled request if either length were taken.
    smuggled = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    raw = exchange(guarded.sock, _search_with_length(*lengths) + smuggled)
    assert len(_responses(raw)) == 1, raw[:600]
    reply = parse(raw)
    assert_error(reply, 400, "bad_request")
    assert "Content-Length" in reply.body["error"]["message"]
    assert reply.headers.get("connection") == "close"


# -- slow and endless senders --------------------------------------------------------------------


@dataclass
class Cut:
    seconds: float
    received: bytes


def trickle(sock: Path, head: bytes, then: bytes, interval: float, give_up: float) -> Cut:
    """Send `head`, then `then` a piece every `interval` seconds forever; time the cut-off."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(sock))
    started = time.monotonic()
    received = b""
    try:
        conn.sendall(head)
        while time.monotonic() - started < give_up:
            try:
                conn.sendall(then)
            except (BrokenPipeError, ConnectionResetError):
                break
            readable = selectors.DefaultSelector()
            readable.register(conn, selectors.EVENT_READ)
            events = readable.select(interval)
            readable.close()
            if events:
                try:
                    chunk = conn.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                received += chunk
        return Cut(time.monotonic() - started, received)
    finally:
        conn.close()


def test_slow_and_endless_senders_are_cut_off(guarded: Guarded) -> None:
    give_up = HEADER_TIMEOUT + 20
    clients = {
        # One byte every 2 s of a request line that never ends.
        "slow request line": (b"GET /v1/health?q=", b"a", 2.0),
        # A header line every second, never the blank line that ends the head.
        "endless headers": (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n", b"X-More: yes\r\n", 1.0),
        # A whole head at once, then the body one byte every 2 s.
        "slow body": (
            b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n",
            b" ",
            2.0,
        ),
    }
    cuts: dict[str, Cut] = {}

    def run(name: str, head: bytes, then: bytes, interval: float) -> None:
        cuts[name] = trickle(guarded.sock, head, then, interval, give_up)

    threads = [threading.Thread(target=run, args=(n, *c)) for n, c in clients.items()]
    for thread in threads:
        thread.start()
    # While they trickle, others are served as usual.
    time.sleep(1)
    assert guarded.health().body["status"] == "ok"
    for thread in threads:
        thread.join(give_up + 10)
    for name, cut in cuts.items():
        assert cut.seconds <= HEADER_TIMEOUT + MARGIN, f"{name}: still open after {cut.seconds} s"
        # Cut off without an answer, or with a JSON error that is not the server's fault.
        if cut.received:
            reply = parse(cut.received)
            assert 400 <= reply.status < 500, (name, cut.received[:300])
    assert guarded.health().body["status"] == "ok"


def test_a_request_trickled_head_then_body_is_cut_at_one_deadline(guarded: Guarded) -> None:
    """The head and the body share one deadline from the request's first byte: a head sent
    slowly does not buy the body a deadline of its own."""
    head = b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    pieces = [head[i : i + 5] for i in range(0, len(head), 5)] + [b" "] * 100
    interval = HEADER_TIMEOUT * 0.6 / len(pieces[:-100])  # the head takes 60% of the deadline
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(guarded.sock))
        started = time.monotonic()
        cut_after = None
        for piece in pieces:
            try:
                conn.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                cut_after = time.monotonic() - started
                break
            conn.settimeout(interval)
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                cut_after = time.monotonic() - started
                break
    assert cut_after is not None, "a request trickled for its whole length was never cut"
    assert cut_after <= HEADER_TIMEOUT + MARGIN, f"cut only after {cut_after:.1f} s"


def test_an_endless_header_stream_sent_fast_is_stopped_by_size(guarded: Guarded) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(guarded.sock))
        conn.sendall(b"GET /v1/health HTTP/1.1\r\n")
        sent = 0
        try:
            while sent < 50_000_000:
                conn.sendall(b"X-Flood: " + b"f" * 100 + b"\r\n")
                sent += 111
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < 50_000_000, "the server kept reading an endless head"
        data = read_all(conn)
    assert_error(parse(data), 431)


# -- hundreds of idle connections ----------------------------------------------------------------


def test_hundreds_of_idle_connections(guarded: Guarded) -> None:
    """Each connection past MAX_CONNECTIONS displaces the one idle longest, closed at once;
    the rest are closed after IDLE_TIMEOUT. Health answers all along, a fresh connection
    included, and a note written meanwhile gets indexed."""
    total = 300
    opened: list[tuple[socket.socket, float]] = []
    refused = 0
    try:
        for _ in range(total):
            conn = connect(guarded.sock, patience=5)
            if conn is None:
                refused += 1
            else:
                opened.append((conn, time.monotonic()))
        flooded = time.monotonic()

        # Indexing goes on under the flood.
        rel = "Flood/Written During.md"
        (guarded.vault / "Flood").mkdir(exist_ok=True)
        (guarded.vault / rel).write_text("# Written During\n\nAn ocelot hums sonatas.\n", "utf-8")
        # A fresh connection is answered at once, though every slot was taken.
        started = time.monotonic()
        fresh = connect(guarded.sock, patience=2)
        assert fresh is not None, "a fresh connection was not accepted"
        with fresh:
            fresh.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            busy_health = parse(read_all(fresh))
        assert time.monotonic() - started < 3
        assert busy_health.status == 200 and busy_health.body["status"] == "ok"

        selector = selectors.DefaultSelector()
        for conn, at in opened:
            conn.setblocking(False)
            selector.register(conn, selectors.EVENT_READ, data=at)
        answers: dict[socket.socket, bytes] = {conn: b"" for conn, _ in opened}
        closed_after: dict[socket.socket, float] = {}
        deadline = flooded + IDLE_TIMEOUT + MARGIN + 2
        while len(closed_after) < len(opened) and time.monotonic() < deadline:
            for key, _ in selector.select(0.5):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                try:
                    chunk = ready.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    answers[ready] += chunk
                    continue
                closed_after[ready] = time.monotonic() - key.data
                selector.unregister(ready)
        selector.close()
        assert len(closed_after) == len(opened), "some connections were never closed"

        # Idle, they sent nothing: closed without a word, to make room or at the idle timeout.
        assert not any(answers.values())
        kept = [c for c, after in closed_after.items() if after >= IDLE_TIMEOUT - 1]
        displaced = len(opened) - len(kept)
        assert displaced + refused >= total - MAX_CONNECTIONS
        assert 0 < len(kept) <= MAX_CONNECTIONS
        for conn in kept:
            assert closed_after[conn] <= IDLE_TIMEOUT + MARGIN
    finally:
        for conn, _ in opened:
            conn.close()

    # The slots are free again, the daemon is healthy and indexed the note.
    assert guarded.health().body["status"] == "ok"
    hits = search_reply(guarded, "ocelot sonatas", rel)
    assert hits[0]["path"] == rel
    assert guarded.daemon.process.poll() is None


def connect(sock: Path, patience: float) -> socket.socket | None:
    """Connect, retrying while the listen queue is full (EAGAIN); None if it stays full."""
    deadline = time.monotonic() + patience
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(patience)
        try:
            conn.connect(str(sock))
        except BlockingIOError:
            conn.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
            continue
        except OSError:
            conn.close()
            return None
        return conn


def read_all(conn: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def search_reply(guarded: Guarded, query: str, wait_for: str) -> list[dict[str, object]]:
    reply = post(
        guarded.sock,
        "/v1/search",
        {"query": query, "k": 3, "mode": "keyword", "wait_for": wait_for, "timeout": MAX_WAIT},
        timeout=MAX_WAIT + 30,
    )
    assert reply.status == 200, reply.body
    hits: list[dict[str, object]] = reply.body["hits"]
    return hits


# -- a daemon killed without cleanup (keep last: it replaces the module's daemon) ----------------


def test_a_stale_socket_is_ignored_by_the_cli_and_removed_by_the_next_start(
    guarded: Guarded,
) -> None:
    old = guarded.daemon
    old.stop(signal.SIGKILL)
    assert stat.S_ISSOCK(old.socket.lstat().st_mode), "the killed daemon's socket is left"

    # Nobody answers there: the CLI works on the store directly (the lock died with it).
    found = vaultd("search", "compost", "--json", "-k", "1", config=old.config)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["path"] == "Garden/Compost.md"

    with pytest.raises(ConnectionRefusedError):
        call(old.socket, "GET", "/v1/health")

    # bind() fails on an existing path: serving there means the stale file was removed first.
    fresh = start(old.config, old.socket, old.log)
    guarded.spares.append(fresh)
    guarded.daemon = fresh
    assert fresh.socket == old.socket
    assert mode(fresh.socket) == 0o600
    assert guarded.health().body["status"] == "ok"
    assert fresh.search("compost", k=1)[0]["path"] == "Garden/Compost.md"
