"""`vaultd ui`'s server against a real daemon: what a web page in the same browser, a
DNS-rebinding page or another local user could try is refused, and the secret is never logged.

Another user is real here: a child run as `nobody` (uid 65534), connecting from 127.0.0.1,
127.0.0.2 and IPv4-mapped IPv6 sources; those tests skip, saying why, where the suite cannot
switch users (not root, or no Python `nobody` may run). On the code before the owner check
covered every source, the connection from 127.0.0.2 as `nobody` got the cookie (and spent the
user's link), and the browser was started with the link, secret and all, on its command line.
"""

from __future__ import annotations

import html
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from click.testing import CliRunner

from harness.daemon import PATIENCE, RunningDaemon, running, wait_until
from harness.vaults import write_vault
from tests.page_server import ui_server
from vaultd.cli.commands import main as cli
from vaultd.errors import EXIT_CONFIG
from vaultd.ui.server import CSP, UiServer

VAULTD = [sys.executable, "-m", "vaultd"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    tmp = tmp_path_factory.mktemp("ui")
    with running(write_vault(tmp / "vault"), tmp) as d:
        d.wait_idle()
        yield d


@pytest.fixture
def ui(daemon: RunningDaemon) -> Iterator[UiServer]:
    with ui_server(daemon.client, Path(daemon.request("GET", "/v1/health")["vault"])) as server:
        yield server


def ask(
    server: UiServer,
    method: str,
    target: str,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    sent = {"Host": f"127.0.0.1:{server.port}", **(headers or {})}
    data = None if body is None else json.dumps(body).encode()
    connection.request(method, target, body=data, headers=sent)
    try:
        answer = connection.getresponse()
        answer.read()
    finally:
        connection.close()
    return answer


def login(server: UiServer) -> str:
    answer = ask(server, "GET", server.url.split(str(server.port), 1)[1])
    assert answer.status == 200
    cookie = answer.getheader("Set-Cookie") or ""
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return cookie.split(";", 1)[0]


def test_the_secret_lets_a_browser_in_again_and_the_cookie_outlives_the_browser(
    ui: UiServer,
) -> None:
    cookie = login(ui)
    # Another browser (or the same one after a restart) opens the link file again: let in.
    again = login(ui)
    for each in (cookie, again):
        assert ask(ui, "GET", "/", {"Cookie": each}).status == 200
    answer = ask(ui, "GET", ui.url.split(str(ui.port), 1)[1])
    max_age = re.search(r"Max-Age=(\d+)", answer.getheader("Set-Cookie") or "")
    assert max_age is not None and int(max_age.group(1)) >= 86400  # kept when the browser closes
    page = ask(ui, "GET", "/", {"Cookie": cookie})
    assert page.status == 200
    assert page.getheader("Content-Security-Policy") == CSP
    assert page.getheader("X-Content-Type-Options") == "nosniff"
    assert ask(ui, "GET", "/static/app.js", {"Cookie": cookie}).status == 200
    assert ask(ui, "GET", "/api/v1/status", {"Cookie": cookie}).status == 200


def test_no_cookie_or_a_wrong_one_is_refused(ui: UiServer) -> None:
    login(ui)
    for headers in ({}, {"Cookie": "vaultd_ui=guess"}):
        for target in ("/", "/static/app.js", "/api/v1/status", "/api/v1/tags"):
            answer = ask(ui, "GET", target, headers)
            assert answer.status == 403, (target, headers)
            assert answer.getheader("Access-Control-Allow-Origin") is None


def test_a_wrong_host_is_refused_even_with_the_cookie(ui: UiServer) -> None:
    cookie = login(ui)
    for host in ("evil.example", f"evil.example:{ui.port}", "127.0.0.1", f"[::1]:{ui.port}"):
        answer = ask(ui, "GET", "/api/v1/status", {"Cookie": cookie, "Host": host})
        assert answer.status == 421, host


def test_a_cross_site_origin_is_refused_and_no_cors_is_offered(ui: UiServer) -> None:
    cookie = login(ui)
    search = {"query": "garden"}
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{ui.port + 1}"):
        answer = ask(ui, "POST", "/api/v1/search", {"Cookie": cookie, "Origin": origin}, search)
        assert answer.status == 403, origin
        assert answer.getheader("Access-Control-Allow-Origin") is None
    site = {"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}
    assert ask(ui, "GET", "/api/v1/status", site).status == 403
    # A POST without an Origin is refused too; one from the page itself passes.
    assert ask(ui, "POST", "/api/v1/search", {"Cookie": cookie}, search).status == 403
    own = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{ui.port}"}
    assert ask(ui, "POST", "/api/v1/search", own, search).status == 200
    assert ask(ui, "OPTIONS", "/api/v1/search", own).status == 405


def test_only_reads_and_reindex_reach_the_daemon(ui: UiServer) -> None:
    cookie = login(ui)
    own = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{ui.port}"}
    assert ask(ui, "GET", "/api/v1/export", own).status == 404
    assert ask(ui, "GET", "/api/v1/notes/Garden/Compost.md", own).status == 200
    assert ask(ui, "POST", "/api/v1/reindex", own, {}).status == 202
    assert ask(ui, "GET", "/api/v1/search", own).status == 404  # search is a POST
    assert ask(ui, "GET", "/api/../../etc/passwd", own).status == 404


def test_a_wrong_key_spends_nothing_and_the_link_file_may_start_the_exchange(ui: UiServer) -> None:
    target = ui.url.split(str(ui.port), 1)[1]
    assert ask(ui, "GET", "/?key=guess").status == 403
    assert ask(ui, "GET", "/?key=%C3%A9t%C3%A9").status == 403  # not ASCII: refused, not a crash
    # The link file is a file:// page: the browser calls the navigation it starts cross-site.
    navigation = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    answer = ask(ui, "GET", target, navigation)
    assert answer.status == 200
    cookie = (answer.getheader("Set-Cookie") or "").split(";", 1)[0]
    # Anything else cross-site is still refused, the cookie notwithstanding.
    assert ask(ui, "GET", "/", {**navigation, "Cookie": cookie}).status == 403
    assert ask(ui, "GET", "/", {"Cookie": cookie}).status == 200


# -- the real command -------------------------------------------------------------------------


@contextmanager
def vaultd_ui(
    daemon: RunningDaemon, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """`vaultd ui` run for the daemon's vault, with the lines it printed up to the link file's;
    stopped (SIGTERM) after, its output then checked for the secret by the caller."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    command = [*VAULTD, "ui", *args, "--config", str(daemon.config)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, text=True
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("open: "):
                break
        assert lines and lines[-1].startswith("open: "), (lines, process.poll())
        yield process, lines
    finally:
        process.terminate()
        process.communicate(timeout=PATIENCE)


def link_file(lines: list[str]) -> Path:
    uri = lines[-1].removeprefix("open: ").strip()
    assert uri.startswith("file://"), uri
    return Path(unquote(urlsplit(uri).path))


def link_in(path: Path) -> str:
    """The one-time link the file sends the browser to."""
    found = re.search(r'content="0;url=([^"]+)"', path.read_text(encoding="utf-8"))
    assert found is not None, path.read_text(encoding="utf-8")
    return html.unescape(found.group(1))


def key_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["key"][0]


#: A browser for $BROWSER: records its arguments and every process's command line while it
#: starts, then does what a browser does with the file (follows its link) and records that.
BROWSER = """#!{python}
import html, json, os, re, stat, sys, http.client
from urllib.parse import unquote, urlsplit
record = {{"argv": sys.argv, "cmdlines": []}}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{{pid}}/cmdline", "rb") as handle:
            words = handle.read().split(b"\\0")
        record["cmdlines"].append(b" ".join(words).decode("utf-8", "replace"))
    except OSError:
        pass
target = sys.argv[1]
if target.startswith("file://"):
    path = unquote(urlsplit(target).path)
    record["file_mode"] = stat.S_IMODE(os.stat(path).st_mode)
    record["dir_mode"] = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
    with open(path, encoding="utf-8") as handle:
        target = html.unescape(re.search(r'url=([^"]+)"', handle.read()).group(1))
    record["link"] = target
url = urlsplit(target)
connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
connection.request("GET", f"{{url.path}}?{{url.query}}", headers={{"Host": url.netloc}})
answer = connection.getresponse()
record["status"] = answer.status
record["cookie"] = bool(answer.getheader("Set-Cookie"))
if record.get("link"):
    record["file_left"] = os.path.exists(path)
with open(os.environ["BROWSER_RECORD"], "w") as handle:
    json.dump(record, handle)
"""


def private_runtime_dir(tmp_path: Path) -> Path:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return runtime


def test_the_browser_is_started_without_the_secret_on_any_command_line(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    browser = tmp_path / "browser"
    browser.write_text(BROWSER.format(python=sys.executable), encoding="utf-8")
    browser.chmod(0o755)
    record = tmp_path / "record.json"
    runtime = private_runtime_dir(tmp_path)
    env = {"BROWSER": str(browser), "BROWSER_RECORD": str(record), "XDG_RUNTIME_DIR": str(runtime)}
    with vaultd_ui(daemon, env=env) as (process, lines):
        wait_until(record.exists, "the browser has followed the link")
        seen = json.loads(record.read_text(encoding="utf-8"))
        secret = key_of(seen.get("link") or seen["argv"][1])
        # Neither the browser's command line nor any other process's holds the secret...
        assert all(secret not in line for line in seen["cmdlines"]), "the secret is on a cmdline"
        assert seen["argv"][1:] == [link_file(lines).as_uri()]
        # ...which lives in a file only the user can read, in a private runtime directory.
        assert link_file(lines).parent.parent == runtime
        assert (seen["file_mode"], seen["dir_mode"]) == (0o600, 0o700)
        assert (seen["status"], seen["cookie"]) == (200, True)
        assert seen["file_left"] is True  # it lets another browser in while the page runs
        assert process.poll() is None
    out, err = process.communicate()
    assert secret not in "".join(lines) + out + err
    assert list(runtime.iterdir()) == []


def test_the_secret_is_never_logged_nor_printed(daemon: RunningDaemon, tmp_path: Path) -> None:
    runtime = private_runtime_dir(tmp_path)
    with vaultd_ui(daemon, "--no-browser", env={"XDG_RUNTIME_DIR": str(runtime)}) as (
        process,
        lines,
    ):
        path = link_file(lines)
        link = link_in(path)
        secret = key_of(link)
        port = urlsplit(link).port
        assert port is not None
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", f"/?key={secret}", headers={"Host": f"127.0.0.1:{port}"})
        assert connection.getresponse().status == 200
        connection.close()
        assert path.exists()  # until the page stops
    out, err = process.communicate()
    assert not path.parent.exists()
    assert process.returncode in (0, -15)
    assert secret not in "".join(lines) + out + err
    assert secret not in daemon.log_text()


def test_vaultd_ui_refuses_to_serve_when_owners_cannot_be_known(
    daemon: RunningDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultd.ui import owner  # (absent before the owner check covered every source)

    monkeypatch.setattr(owner, "TABLES", ((tmp_path / "no-tcp", 4), (tmp_path / "no-tcp6", 6)))
    result = CliRunner().invoke(cli, ["ui", "--no-browser", "--config", str(daemon.config)])
    assert result.exit_code == EXIT_CONFIG, result.output
    assert "which user each connection comes from" in result.output


# -- who connects: the kernel's word, from any loopback address --------------------------------

OTHER_UID = 65534
#: Every source a local process may connect from: the kernel's owner check must not care.
SOURCES = ("127.0.0.1", "127.0.0.2", "::ffff:127.0.0.1", "::ffff:127.0.0.2")

#: Run as the user or as `nobody` (standard library only): one request from each source, its
#: status or the exception that ended it, by source. The job comes on stdin.
KNOCK = """
import http.client, json, socket, sys
job = json.load(sys.stdin)
out = {}
for source in job["sources"]:
    family = socket.AF_INET6 if ":" in source else socket.AF_INET
    server = "::ffff:127.0.0.1" if family == socket.AF_INET6 else "127.0.0.1"
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.bind((source, 0))
        sock.connect((server, job["port"]))
        connection = http.client.HTTPConnection("127.0.0.1", job["port"], timeout=30)
        connection.sock = sock
        connection.request("GET", job["target"], headers=job["headers"])
        out[source] = connection.getresponse().status
    except Exception as exc:
        out[source] = type(exc).__name__
print(json.dumps(out))
"""


def other_user_python() -> str:
    """A Python `nobody` may run (the user's may sit in a home `nobody` cannot enter), or a
    skip saying why there is none."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        pytest.skip(
            "playing another user needs root on Linux (a child run as nobody); without it "
            "the cookie alone keeps another user out, which the no-cookie test covers"
        )
    why = "no Python found"
    for python in ("/usr/bin/python3", shutil.which("python3"), sys.executable):
        if not python:
            continue
        try:
            probe = subprocess.run(
                [python, "-I", "-c", "import os; print(os.getuid())"],
                user=OTHER_UID,
                group=OTHER_UID,
                extra_groups=[],
                capture_output=True,
                text=True,
                cwd="/",
                timeout=PATIENCE,
            )
        except OSError as exc:
            why = str(exc)
            continue
        if probe.returncode == 0 and probe.stdout.strip() == str(OTHER_UID):
            return python
        why = probe.stderr.strip()[:200]
    pytest.skip(f"no Python that uid {OTHER_UID} may run: {why}")


def knock(
    port: int, target: str, headers: dict[str, str], *, other_user: bool = False
) -> dict[str, int | str]:
    """What a request to `target` gets from each of SOURCES, sent by this user or another."""
    job = json.dumps({"port": port, "target": target, "sources": SOURCES, "headers": headers})
    if other_user:
        python = other_user_python()
        who: dict[str, Any] = {"user": OTHER_UID, "group": OTHER_UID, "extra_groups": []}
    else:
        python, who = sys.executable, {}
    result = subprocess.run(
        [python, "-I", "-c", KNOCK],
        input=job,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        cwd="/",
        check=False,
        **who,
    )
    assert result.returncode == 0, result.stderr
    answers: dict[str, int | str] = json.loads(result.stdout)
    return answers


def test_another_users_connection_is_refused_from_every_loopback_address(ui: UiServer) -> None:
    target = ui.url.split(str(ui.port), 1)[1]
    host = {"Host": f"127.0.0.1:{ui.port}"}
    # Holding the link itself (as someone who saw it would), from every source: closed before
    # a byte is read, so the user's link is not spent...
    stolen = knock(ui.port, target, host, other_user=True)
    assert all(isinstance(answer, str) for answer in stolen.values()), stolen
    cookie = login(ui)
    # ...and holding the cookie, the same.
    stolen = knock(ui.port, "/api/v1/status", {**host, "Cookie": cookie}, other_user=True)
    assert all(isinstance(answer, str) for answer in stolen.values()), stolen
    # The same request from this user passes.
    assert ask(ui, "GET", "/api/v1/status", {"Cookie": cookie}).status == 200


def test_another_user_cannot_spend_the_link_of_vaultd_ui(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    other_user_python()
    runtime = private_runtime_dir(tmp_path)
    with vaultd_ui(daemon, "--no-browser", env={"XDG_RUNTIME_DIR": str(runtime)}) as (_, lines):
        link = link_in(link_file(lines))
        url = urlsplit(link)
        assert url.port is not None
        target = f"{url.path}?{url.query}"
        host = {"Host": url.netloc}
        stolen = knock(url.port, target, host, other_user=True)
        assert all(isinstance(answer, str) for answer in stolen.values()), stolen
        # The user's link still works.
        connection = http.client.HTTPConnection("127.0.0.1", url.port, timeout=30)
        connection.request("GET", target, headers=host)
        assert connection.getresponse().status == 200
        connection.close()


def test_the_users_own_connections_pass_from_every_loopback_address(ui: UiServer) -> None:
    cookie = login(ui)
    headers = {"Host": f"127.0.0.1:{ui.port}", "Cookie": cookie}
    assert knock(ui.port, "/api/v1/status", headers) == dict.fromkeys(SOURCES, 200)


def test_an_owner_the_kernel_does_not_tell_is_refused(
    ui: UiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultd.ui import owner  # (absent before the owner check covered every source)

    cookie = login(ui)
    headers = {"Host": f"127.0.0.1:{ui.port}", "Cookie": cookie}
    # The socket tables unreadable (another system than Linux, a sandbox without /proc).
    monkeypatch.setattr(owner, "TABLES", ((tmp_path / "no-tcp", 4), (tmp_path / "no-tcp6", 6)))
    assert all(isinstance(a, str) for a in knock(ui.port, "/api/v1/status", headers).values())
    monkeypatch.undo()
    assert ask(ui, "GET", "/api/v1/status", {"Cookie": cookie}).status == 200


#: Run as `nobody`: sends the request on stdin from 127.0.0.2, then closes at once.
SEND_AND_CLOSE = """
import socket, sys
port, request = sys.stdin.read().split(" ", 1)
sock = socket.socket()
sock.bind(("127.0.0.2", 0))
sock.connect(("127.0.0.1", int(port)))
sock.sendall(request.encode())
sock.close()
"""


def test_a_request_whose_sender_closed_at_once_is_refused_even_by_a_page_run_as_root(
    ui: UiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel may list a socket its process closed as root's, whoever made it (those that take
    the owner from the socket's file do): a page run as root must not take that for its own, or
    the sender would spend the link unseen. (Where the kernel keeps the maker's uid, as 6.18
    does, this passes either way; the next test holds the rule on the table's own lines.)"""
    from vaultd.ui import owner, server

    python = other_user_python()
    target = ui.url.split(str(ui.port), 1)[1]
    sent, asked = threading.Event(), threading.Event()
    lookup = owner.socket_owner

    def after_the_sender_closed(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
        if not asked.is_set():
            asked.set()
            sent.wait(PATIENCE)  # the server's check comes after the sender has gone
        return lookup(peer, local)

    monkeypatch.setattr(server, "socket_owner", after_the_sender_closed)
    request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{ui.port}\r\n\r\n"
    subprocess.run(
        [python, "-I", "-c", SEND_AND_CLOSE],
        input=f"{ui.port} {request}",
        text=True,
        check=True,
        timeout=PATIENCE,
        cwd="/",
        user=OTHER_UID,
        group=OTHER_UID,
        extra_groups=[],
    )
    wait_until(asked.is_set, "the server asks who sent the request")
    sent.set()
    # The link was not spent: the user's own use of it gets the cookie.
    assert ask(ui, "GET", target).status == 200


def test_the_owner_is_read_from_the_kernels_own_lines(tmp_path: Path) -> None:
    """A live socket's owner is its uid; a socket its process closed (inode 0, listed as
    root's whoever made it) and a socket in no table are unknown."""
    from vaultd.ui import owner

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname(), timeout=30)
        accepted, peer = server.accept()
        with client, accepted:
            local = accepted.getsockname()
            assert owner.socket_owner(peer, local) == os.getuid()
            assert owner.socket_owner(("127.0.0.3", peer[1]), local) is None
            copies = []
            for table, family in owner.TABLES:
                copy = tmp_path / table.name
                lines = table.read_text(encoding="ascii").splitlines(keepends=True)
                copy.write_text(
                    lines[0] + "".join(_orphaned(line, owner.INODE) for line in lines[1:])
                )
                copies.append((copy, family))
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(owner, "TABLES", tuple(copies))
                assert owner.socket_owner(peer, local) is None


def _orphaned(line: str, inode: int) -> str:
    fields = line.split()
    fields[inode] = "0"
    return " ".join(fields) + "\n"
