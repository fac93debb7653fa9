"""`vaultd ui`'s server against a real daemon: what a web page in the same browser, a
DNS-rebinding page or another local user could try is refused, and the secret is never logged."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.daemon import RunningDaemon, running
from harness.vaults import write_vault
from tests.ui import ui_server
from vaultd.ui.server import CSP, UiServer


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
    assert answer.status == 303
    cookie = answer.getheader("Set-Cookie") or ""
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    return cookie.split(";", 1)[0]


def test_the_secret_is_one_time_and_the_cookie_opens_the_page(ui: UiServer) -> None:
    target = ui.url.split(str(ui.port), 1)[1]
    cookie = login(ui)
    assert ask(ui, "GET", target).status == 403  # the link works once
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


def test_the_secret_is_never_logged(daemon: RunningDaemon, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "vaultd", "ui", "--no-browser", "--config", str(daemon.config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = ""
        for line in process.stdout:
            if line.startswith("open: "):
                url = line.split("open: ", 1)[1].strip()
                break
        assert "key=" in url
        secret = url.split("key=", 1)[1]
        port = int(url.split(":")[2].split("/")[0])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", f"/?key={secret}", headers={"Host": f"127.0.0.1:{port}"})
        assert connection.getresponse().status == 303
        connection.close()
    finally:
        process.terminate()
        out, err = process.communicate(timeout=30)
    assert process.returncode in (0, -15)
    assert secret not in err and secret not in out
    assert secret not in daemon.log_text()


OTHER_UID = 65534


def _can_switch_user() -> bool:
    return os.geteuid() == 0 and sys.platform.startswith("linux")


@pytest.mark.skipif(
    not _can_switch_user(),
    reason="needs root to run a child as another uid (nobody); without it the cookie alone "
    "keeps another user out, which the no-cookie test covers",
)
def test_another_users_process_is_refused(ui: UiServer) -> None:
    cookie = login(ui)
    code = (
        "import http.client,sys\n"
        f"c = http.client.HTTPConnection('127.0.0.1', {ui.port}, timeout=10)\n"
        "try:\n"
        f"    c.request('GET', '/api/v1/status', headers={{'Host': '127.0.0.1:{ui.port}', "
        f"'Cookie': '{cookie}'}})\n"
        "    print(c.getresponse().status)\n"
        "except Exception as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )

    def as_nobody() -> None:
        os.setgid(OTHER_UID)
        os.setuid(OTHER_UID)

    # The system's Python (stdlib only): the user's may sit in a home `nobody` cannot enter.
    python = next(
        (p for p in ("/usr/bin/python3", shutil.which("python3")) if p and os.path.exists(p)),
        sys.executable,
    )
    result = subprocess.run(
        [python, "-c", code],
        preexec_fn=as_nobody,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    # Even holding the cookie, the other user's connection is closed before it is read.
    assert result.stdout.startswith("refused"), (result.stdout, result.stderr)
    # The same request from this user passes.
    assert ask(ui, "GET", "/api/v1/status", {"Cookie": cookie}).status == 200
