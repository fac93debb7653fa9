"""The socket API against a real `vaultd run`, over its real Unix socket.

One daemon serves the whole module (a start costs seconds): its socket sits at
`$XDG_RUNTIME_DIR/vaultd/vaultd.sock` for a short temporary XDG_RUNTIME_DIR, so the README's
`curl --unix-socket` example runs exactly as written. The helpers here (raw HTTP over the
socket, the error-shape check) are shared with the security and fuzzing modules; the small vault
is `harness.vaults`'s.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from harness.daemon import RunningDaemon, short_socket_dir, start, wait_until, write_config
from harness.vaults import NOTES, write_vault
from vaultd.api.limits import MAX_BODY, MAX_WAIT
from vaultd.cli.commands import main
from vaultd.query import MAX_K

ROOT = Path(__file__).resolve().parents[1]

# -- raw HTTP over the socket --------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any
    raw: bytes


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(str(self._path))
        except OSError:
            sock.close()
            raise
        self.sock = sock


def call(
    sock: Path,
    method: str,
    target: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> Reply:
    """One request with a well-formed HTTP framing; the reply's body parsed as JSON."""
    connection = _UnixHTTP(sock, timeout)
    try:
        sent = dict(headers or {})
        if body is not None:
            sent.setdefault("Content-Type", "application/json")
        connection.request(method, target, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read()
        reply_headers = {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()
    return Reply(response.status, reply_headers, json.loads(data), data)


def post(sock: Path, target: str, payload: Any, timeout: float = 60) -> Reply:
    return call(sock, "POST", target, json.dumps(payload).encode(), timeout=timeout)


def exchange(sock: Path, data: bytes, timeout: float = 20) -> bytes:
    """Send raw bytes and end the sending side, then read until the server closes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(sock))
        try:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may close before taking everything; its answer is still there
        chunks = []
        while True:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def parse(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    match = re.match(r"HTTP/1\.[01] (\d{3}) ", lines[0])
    assert match, f"not an HTTP response: {raw[:200]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    assert len(body) >= length
    return Reply(int(match.group(1)), headers, json.loads(body[:length]), raw)


def assert_error(reply: Reply, status: int, code: str | None = None) -> None:
    """Every error is JSON `{"error": {"code": str, "message": str}}` with a fitting status
    (and a `kind` where a client acts on what exactly is refused, a `field` where one request
    field is)."""
    assert reply.status == status, reply.raw[:500]
    assert reply.headers.get("content-type") == "application/json"
    assert isinstance(reply.body, dict) and set(reply.body) == {"error"}, reply.body
    error = reply.body["error"]
    assert set(error) - {"kind", "field"} == {"code", "message"}
    if "field" in error:
        assert isinstance(error["field"], str) and error["message"].startswith(error["field"])
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error


# -- the daemon shared by this module ------------------------------------------------------------


@dataclass
class Setup:
    daemon: RunningDaemon
    vault: Path
    runtime: Path
    config: Path

    @property
    def sock(self) -> Path:
        return self.daemon.socket


def start_daemon(vault: Path, workdir: Path, runtime: Path, **kwargs: Any) -> RunningDaemon:
    """`vaultd run` with its socket at $XDG_RUNTIME_DIR/vaultd/vaultd.sock, ready."""
    sock = runtime / "vaultd" / "vaultd.sock"
    config = write_config(workdir / "vaultd.toml", vault, workdir / "data", sock)
    return start(config, sock, workdir / "vaultd.log", **kwargs)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    work = tmp_path_factory.mktemp("server")
    vault = write_vault(work / "vault")
    runtime = short_socket_dir()
    daemon = start_daemon(vault, work, runtime)
    try:
        yield Setup(daemon, vault, runtime, daemon.config)
    finally:
        daemon.stop()
        shutil.rmtree(runtime, ignore_errors=True)


def search(setup: Setup, **body: Any) -> list[dict[str, Any]]:
    # Longer than the longest wait the server may spend on `wait_for`, and the search after.
    reply = post(setup.sock, "/v1/search", body, timeout=MAX_WAIT + 30)
    assert reply.status == 200, reply.body
    hits: list[dict[str, Any]] = reply.body["hits"]
    return hits


# -- endpoints -----------------------------------------------------------------------------------

HIT_KEYS = {"path", "title", "section", "start_line", "end_line", "score", "text", "tags", "id"}


def test_health(setup: Setup) -> None:
    reply = call(setup.sock, "GET", "/v1/health")
    assert reply.status == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.body["status"] == "ok"
    assert "reason" not in reply.body
    assert reply.body["version"]


def test_status_reports_counts_queue_freshness_model_and_store(setup: Setup) -> None:
    body = call(setup.sock, "GET", "/v1/status").body
    assert body["status"] == "ok"
    assert body["notes"] == len(NOTES)
    assert body["chunks"] >= len(NOTES)
    assert isinstance(body["queue_depth"], int) and body["queue_depth"] >= 0
    assert body["failed"] == []
    assert body["last_reconcile"]["notes_seen"] == len(NOTES)
    assert {"p50", "p95", "samples"} <= set(body["lag_seconds"])
    assert isinstance(body["model"], str) and body["model"]
    assert Path(body["store"]["data_dir"]) == setup.config.parent / "data"
    assert body["version"]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword"])
def test_search_each_mode(setup: Setup, mode: str) -> None:
    hits = search(setup, query="garden watering tomatoes", k=3, mode=mode)
    assert 1 <= len(hits) <= 3
    assert hits[0]["path"] == "Garden/Watering.md"
    for hit in hits:
        assert set(hit) >= HIT_KEYS
        assert "explain" not in hit
        assert 1 <= hit["start_line"] <= hit["end_line"]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_search_k_limits_the_hits(setup: Setup) -> None:
    assert len(search(setup, query="garden", k=1)) == 1
    assert len(search(setup, query="garden", k=MAX_K)) <= MAX_K


def test_search_tag_filter_matches_nested_tags_under_their_parent(setup: Setup) -> None:
    parent = {h["path"] for h in search(setup, query="garden beds", k=20, tags=["garden"])}
    assert parent == {"Garden/Watering.md", "Garden/Compost.md"}  # garden/water counts
    nested = {h["path"] for h in search(setup, query="garden beds", k=20, tags=["#garden/water"])}
    assert nested == {"Garden/Watering.md"}
    both = search(setup, query="garden", k=20, tags=["garden", "home"])
    assert {h["path"] for h in both} == {"Garden/Watering.md"}
    assert search(setup, query="garden", tags=["no-such-tag"]) == []


def test_search_path_prefix(setup: Setup) -> None:
    folder = search(setup, query="Garten Reise garden", k=20, path_prefix="Über Ordner")
    assert {h["path"] for h in folder} == {"Über Ordner/Über Notiz.md"}
    exact = search(setup, query="garden", k=20, path_prefix="Garden/Compost.md")
    assert {h["path"] for h in exact} == {"Garden/Compost.md"}
    assert search(setup, query="garden", path_prefix="Gard") == []  # folders, not prefixes


def test_search_explain_shows_score_parts(setup: Setup) -> None:
    hits = search(setup, query="sourdough bread", k=2, explain=True)
    assert hits[0]["path"] == "Kitchen/Bread Recipe.md"
    assert {"keyword", "vector"} <= set(hits[0]["explain"])


def test_wait_for_a_path_just_written_finds_it_at_once(setup: Setup) -> None:
    rel = "Inbox/Fresh Idea.md"
    (setup.vault / "Inbox").mkdir(exist_ok=True)
    (setup.vault / rel).write_text("# Fresh Idea\n\nA quokka juggles marmalade.\n", "utf-8")
    hits = search(
        setup, query="quokka marmalade", k=3, mode="keyword", wait_for=rel, timeout=MAX_WAIT
    )
    assert hits and hits[0]["path"] == rel
    # An edit: answered only once the new content is indexed.
    (setup.vault / rel).write_text("# Fresh Idea\n\nA wombat paints lighthouses.\n", "utf-8")
    hits = search(
        setup, query="wombat lighthouses", k=3, mode="keyword", wait_for=rel, timeout=MAX_WAIT
    )
    assert hits and hits[0]["path"] == rel
    assert "wombat" in hits[0]["text"]

    # The edits came from the watcher: save-to-searchable lag is measured (by the pass, just
    # after the manifest has the note).
    def lag() -> dict[str, Any]:
        found: dict[str, Any] = call(setup.sock, "GET", "/v1/status").body["lag_seconds"]
        return found

    wait_until(lambda: lag()["samples"] >= 1, "the lag is measured")
    measured = lag()
    assert 0 <= measured["p50"] <= measured["p95"]


def test_wait_for_idle(setup: Setup) -> None:
    hits = search(setup, query="compost", k=1, wait_for="idle", timeout=MAX_WAIT)
    assert hits[0]["path"] == "Garden/Compost.md"
    assert call(setup.sock, "GET", "/v1/status").body["queue_depth"] == 0


def test_wait_for_timeout_is_503(setup: Setup) -> None:
    rel = "Inbox/Not Yet.md"
    (setup.vault / "Inbox").mkdir(exist_ok=True)
    (setup.vault / rel).write_text("# Not Yet\n\nWritten a moment ago.\n", "utf-8")
    # The watcher's debounce alone outlasts a zero timeout.
    reply = post(setup.sock, "/v1/search", {"query": "x", "wait_for": rel, "timeout": 0})
    assert_error(reply, 503, "timeout")
    assert rel in reply.body["error"]["message"]
    # The CLI says it as a person reads it: what was not indexed and what to do, no HTTP.
    # In this process, so it asks before the debounce is over.
    later = "Inbox/Later.md"
    (setup.vault / later).write_text("# Later\n\nWritten a moment ago too.\n", "utf-8")
    asked = ["search", "x", "--wait-for", later, "--timeout", "0", "--config", str(setup.config)]
    said = CliRunner().invoke(main, asked, env={"VAULTD_CONFIG": ""})
    assert said.exit_code == 1 and not said.stdout, said.output
    assert said.stderr == (
        f"vaultd: '{later}' was not indexed within 0 s; ask again to wait longer "
        f"(a search waits at most {MAX_WAIT:g} s)\n"
    )


def test_note_with_spaces_and_non_ascii_in_its_path(setup: Setup) -> None:
    rel = "Über Ordner/Über Notiz.md"
    reply = call(setup.sock, "GET", "/v1/notes/" + quote(rel))
    assert reply.status == 200
    note = reply.body
    assert note["path"] == rel
    assert note["title"] == "Über Notiz"
    assert note["tags"] == ["reise"]
    assert note["backlinks"] == ["Garden/Watering.md"]
    [chunk] = note["chunks"]
    assert chunk["start_line"] == chunk["end_line"] == 3
    assert "Grüße" in chunk["text"]


def test_note_title_aliases_tags_links_backlinks_chunks(setup: Setup) -> None:
    note = call(setup.sock, "GET", "/v1/notes/" + quote("Garden/Watering.md")).body
    assert note["title"] == "Garden Watering"
    assert note["aliases"] == ["Watering", "Irrigation"]
    assert note["tags"] == ["garden/water", "home"]
    assert [link["target"] for link in note["links"]] == ["Compost", "Über Notiz"]
    # Compost links by alias, the recipe by path with a heading.
    assert sorted(note["backlinks"]) == ["Garden/Compost.md", "Kitchen/Bread Recipe.md"]
    ranges = [(c["section"], c["start_line"], c["end_line"]) for c in note["chunks"]]
    assert ranges == [("Garden Watering", 8, 8), ("Garden Watering > Schedule", 12, 12)]
    assert [c["index"] for c in note["chunks"]] == [0, 1]


def test_unknown_note_is_404(setup: Setup) -> None:
    reply = call(setup.sock, "GET", "/v1/notes/No%20Such%20Note.md")
    assert_error(reply, 404, "not_found")
    # What the CLI tells apart from a note it may not read: a field, not the message's words.
    assert reply.body["error"]["kind"] == "not_indexed"
    assert_error(call(setup.sock, "GET", "/v1/notes/"), 404, "not_found")


def test_reindex_paths_and_everything(setup: Setup) -> None:
    reply = post(setup.sock, "/v1/reindex", {"paths": ["Garden/Compost.md"]})
    assert reply.status == 202
    assert reply.body == {"accepted": True, "paths": ["Garden/Compost.md"]}
    reply = call(setup.sock, "POST", "/v1/reindex")  # no body at all: everything
    assert reply.status == 202
    assert reply.body == {"accepted": True, "paths": "all"}
    reply = post(setup.sock, "/v1/reindex", {})
    assert (reply.status, reply.body["paths"]) == (202, "all")
    setup.daemon.wait_idle()
    assert call(setup.sock, "GET", "/v1/health").body["status"] == "ok"


def test_openapi_describes_every_route(setup: Setup) -> None:
    doc = call(setup.sock, "GET", "/openapi.json").body
    assert doc["openapi"].startswith("3.")
    assert set(doc["paths"]) == {
        "/v1/health",
        "/v1/status",
        "/v1/search",
        "/v1/notes/{path}",
        "/v1/notes/{path}/related",
        "/v1/notes/{path}/mentions",
        "/v1/notes/{path}/outline",
        "/v1/notes/{path}/backlinks",
        "/v1/tags",
        "/v1/recent",
        "/v1/reindex",
        "/v1/events",
        "/v1/export",
        "/openapi.json",
    }
    search_request = doc["paths"]["/v1/search"]["post"]["requestBody"]
    properties = search_request["content"]["application/json"]["schema"]["properties"]
    assert {"query", "k", "mode", "tags", "path_prefix", "explain", "wait_for", "timeout"} <= set(
        properties
    )
    assert properties["k"]["maximum"] == MAX_K


# -- errors --------------------------------------------------------------------------------------


def test_unknown_route_is_404(setup: Setup) -> None:
    assert_error(call(setup.sock, "GET", "/v2/health"), 404, "not_found")
    assert_error(post(setup.sock, "/nope", {}), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("GET", "/v1/search"),
        ("POST", "/v1/health"),
        ("PUT", "/v1/status"),
        ("DELETE", "/v1/notes/Garden/Compost.md"),
        ("PATCH", "/v1/reindex"),
        ("POST", "/openapi.json"),
    ],
)
def test_wrong_method_is_405(setup: Setup, method: str, target: str) -> None:
    assert_error(call(setup.sock, method, target), 405, "method_not_allowed")


@pytest.mark.parametrize(
    "body", [b"{", b"not json", b'{"query": "x",}', b"\xff\xfe{}", b"[1, 2]", b'"query"', b"NaN"]
)
def test_invalid_json_is_400(setup: Setup, body: bytes) -> None:
    assert_error(call(setup.sock, "POST", "/v1/search", body), 400, "bad_json")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"query": ""},
        {"query": "   "},
        {"query": 5},
        {"query": ["garden"]},
        {"query": "x", "k": "3"},
        {"query": "x", "k": 2.5},
        {"query": "x", "k": True},
        {"query": "x", "mode": "fuzzy"},
        {"query": "x", "mode": 1},
        {"query": "x", "tags": "garden"},
        {"query": "x", "tags": [1]},
        {"query": "x", "path_prefix": 3},
        {"query": "x", "explain": "yes"},
        {"query": "x", "wait_for": 7},
        {"query": "x", "wait_for": ""},
        {"query": "x", "wait_for": "../outside.md"},
        {"query": "x", "timeout": "soon"},
        {"query": "\ud800"},
    ],
)
def test_wrong_types_are_400(setup: Setup, body: dict[str, Any]) -> None:
    assert_error(post(setup.sock, "/v1/search", body), 400)


@pytest.mark.parametrize("body", [{"paths": "a.md"}, {"paths": [1]}, {"paths": [""]}])
def test_reindex_wrong_types_are_400(setup: Setup, body: dict[str, Any]) -> None:
    assert_error(post(setup.sock, "/v1/reindex", body), 400, "bad_request")


@pytest.mark.parametrize("k", [0, -1, MAX_K + 1, 10**30])
def test_k_out_of_range_is_400(setup: Setup, k: int) -> None:
    reply = post(setup.sock, "/v1/search", {"query": "garden", "k": k})
    assert_error(reply, 400, "bad_request")
    assert str(MAX_K) in reply.body["error"]["message"]


def test_body_over_one_mib_is_413(setup: Setup) -> None:
    body = json.dumps({"query": "garden", "pad": "x" * MAX_BODY}).encode()
    reply = parse(
        exchange(
            setup.sock,
            b"POST /v1/search HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body,
        )
    )
    assert_error(reply, 413, "too_large")
    # Exactly the limit is read and judged on its content.
    padded = b'{"query": "garden"}' + b" " * (MAX_BODY - 19)
    assert len(padded) == MAX_BODY
    assert call(setup.sock, "POST", "/v1/search", padded).status == 200


def test_keep_alive_serves_several_requests_on_one_connection(setup: Setup) -> None:
    connection = _UnixHTTP(setup.sock, 30)
    try:
        for _ in range(3):
            connection.request("GET", "/v1/health")
            response = connection.getresponse()
            assert response.status == 200
            assert json.loads(response.read())["status"] == "ok"
        connection.request("POST", "/v1/search", body=b"{oops")
        response = connection.getresponse()
        assert response.status == 400
        response.read()
        connection.request("GET", "/v1/health")  # a client error does not end the connection
        assert connection.getresponse().status == 200
    finally:
        connection.close()


# -- the README's example ------------------------------------------------------------------------


def readme_curl() -> str:
    """The README's example: the line that finds the socket, and the curl line using it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Querying the daemon", 1)
    assert len(section) == 2, "README.md has no '## Querying the daemon' section"
    lines = [line for line in section[1].splitlines() if line.startswith(("sock=", "curl "))]
    assert len(lines) >= 2 and lines[0].startswith("sock="), "the section has no curl example"
    assert "--unix-socket" in lines[1]
    return "\n".join(lines[:2])


def test_readme_curl_example_works_as_written(setup: Setup) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    command = readme_curl()
    assert "vaultd status --json" in command and '--unix-socket "$sock"' in command
    # The reader puts their own vault where the README says ~/Notes.
    command = command.replace("~/Notes", shlex.quote(str(setup.vault)))
    # As a user runs it: `vaultd` on the PATH, the config where vaultd looks for it.
    bin_dir = str(Path(sys.executable).parent)
    result = subprocess.run(
        ["sh", "-c", command],
        env={
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "VAULTD_CONFIG": str(setup.config),
        },
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)["hits"]
    assert 1 <= len(hits) <= 3
    assert hits[0]["path"] == "Garden/Watering.md"


# -- the CLI through the daemon, and without one -------------------------------------------------


def vaultd(*args: str, config: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vaultd", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "VAULTD_CONFIG": ""},
    )


def test_cli_goes_through_the_running_daemon(setup: Setup) -> None:
    # The daemon holds the data directory's lock: only the socket can answer these.
    found = vaultd(
        "search", "garden watering", "--json", "-k", "2", "--explain", config=setup.config
    )
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert hits[0]["path"] == "Garden/Watering.md"
    assert "explain" in hits[0]

    status = vaultd("status", "--json", config=setup.config)
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["daemon"] is True
    assert report["status"] == "ok"
    assert report["notes"] >= len(NOTES)

    queued = vaultd("reindex", "Garden/Compost.md", config=setup.config)
    assert queued.returncode == 0, queued.stderr
    assert "queued 1 note(s) on the daemon" in queued.stdout
    queued_all = vaultd("reindex", config=setup.config)
    assert queued_all.returncode == 0, queued_all.stderr
    assert "queued all notes on the daemon" in queued_all.stdout
    setup.daemon.wait_idle()


def test_cli_without_a_daemon_works_on_the_store(tmp_path: Path) -> None:
    vault = write_vault(tmp_path / "vault")
    runtime = short_socket_dir()
    try:
        sock = runtime / "vaultd" / "vaultd.sock"
        config = write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", sock)
        indexed = vaultd("reindex", config=config)
        assert indexed.returncode == 0, indexed.stderr
        assert "queued" not in indexed.stdout
        assert f"{len(NOTES)} changed" in indexed.stdout

        found = vaultd("search", "garden watering", "--json", "-k", "2", config=config)
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["hits"][0]["path"] == "Garden/Watering.md"

        status = vaultd("status", "--json", config=config)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["daemon"] is False
        assert report["notes"] == len(NOTES)
        assert not sock.exists()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


# -- one rule for vault paths, in the API, the CLI and the MCP bridge ----------------------------

OUTSIDE = ["/etc/passwd", "../outside.md", "Garden/../../outside.md", "a\x00b.md", "..\\up.md"]
OUTSIDE += ["\\\\server\\share\\x.md", "C:\\x.md", "C:x.md"]


@pytest.mark.parametrize("path", OUTSIDE)
def test_a_path_out_of_the_vault_is_400_wherever_a_path_is_taken(setup: Setup, path: str) -> None:
    reindexed = post(setup.sock, "/v1/reindex", {"paths": ["Garden/Compost.md", path]})
    assert_error(reindexed, 400, "bad_request")
    assert "paths:" in reindexed.body["error"]["message"]
    waited = post(setup.sock, "/v1/search", {"query": "garden", "wait_for": path, "timeout": 5})
    assert_error(waited, 400, "bad_request")
    assert "wait_for:" in waited.body["error"]["message"]
    filtered = post(setup.sock, "/v1/search", {"query": "garden", "path_prefix": path})
    assert_error(filtered, 400, "bad_request")
    assert "path_prefix:" in filtered.body["error"]["message"]
    if "\x00" not in path:  # a NUL byte cannot be part of a URL's path
        note = call(setup.sock, "GET", "/v1/notes/" + quote(path, safe=""))
        assert_error(note, 400, "bad_request")


def test_a_note_path_written_as_url_path_segments_is_judged_the_same(setup: Setup) -> None:
    assert_error(call(setup.sock, "GET", "/v1/notes//etc/passwd"), 400, "bad_request")
    assert_error(call(setup.sock, "GET", "/v1/notes/Garden/../../x.md"), 400, "bad_request")


def test_empty_components_and_nfd_are_normalised_not_refused(setup: Setup) -> None:
    note = call(setup.sock, "GET", "/v1/notes/" + quote("Garden//./Compost.md"))
    assert note.status == 200, note.body
    assert note.body["path"] == "Garden/Compost.md"
    import unicodedata

    decomposed = unicodedata.normalize("NFD", "Über Ordner/Über Notiz.md")
    assert call(setup.sock, "GET", "/v1/notes/" + quote(decomposed)).status == 200
    hits = search(setup, query="garden", k=20, path_prefix="Garden/")
    assert hits and {h["path"] for h in hits} <= {"Garden/Compost.md", "Garden/Watering.md"}
    reply = post(setup.sock, "/v1/reindex", {"paths": ["./Garden//Compost.md"]})
    assert (reply.status, reply.body["paths"]) == (202, ["Garden/Compost.md"])
    setup.daemon.wait_idle()


def test_cli_reindex_refuses_a_path_out_of_the_vault_with_a_usage_error(setup: Setup) -> None:
    for path in ("/etc/passwd", "../outside.md"):
        # The daemon is running: the CLI refuses before asking it, naming the argument typed.
        refused = vaultd("reindex", "Garden/Compost.md", path, config=setup.config)
        assert refused.returncode == 2, (refused.stdout, refused.stderr)
        assert refused.stderr.startswith(f"vaultd: PATHS: not a path inside the vault: {path!r}")
        assert "queued" not in refused.stdout


def test_the_mcp_bridge_uses_the_same_rule(setup: Setup) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from vaultd.api.client import Client
    from vaultd.cli.common import DaemonOrIndex
    from vaultd.cli.mcp_bridge import TOOLS, Bridge
    from vaultd.errors import VaultPathError
    from vaultd.vaultpath import vault_path

    client = Client(setup.sock, timeout=30)
    bridge = Bridge(DaemonOrIndex(lambda: client, None, "start it"))
    links = next(tool for tool in TOOLS if tool.name == "links")
    for path in OUTSIDE:
        with pytest.raises(VaultPathError) as rule:
            vault_path(path)
        with pytest.raises(ToolError) as refused:
            bridge.run(links, {"path": path})
        assert str(rule.value) in str(refused.value)
    assert bridge.run(links, {"path": "Garden//Compost.md"})["path"] == "Garden/Compost.md"


# -- queries: one rule for the empty and the too big, with or without a daemon ------------------


def no_daemon_config(tmp_path: Path) -> Path:
    """A config whose socket no daemon serves, for the CLI's own search."""
    vault = write_vault(tmp_path / "vault")
    runtime = short_socket_dir()
    shutil.rmtree(runtime)  # only its name: nothing is ever served there
    return write_config(tmp_path / "vaultd.toml", vault, tmp_path / "data", runtime / "v.sock")


def test_an_empty_query_is_refused_alike_by_the_daemon_and_the_cli(
    setup: Setup, tmp_path: Path
) -> None:
    from vaultd.errors import QueryError
    from vaultd.query import check_query

    with pytest.raises(QueryError) as rule:
        check_query("")
    message = str(rule.value)
    for query in ("", "   ", "\t\n"):
        reply = post(setup.sock, "/v1/search", {"query": query})
        assert_error(reply, 400, "bad_request")
        assert reply.body["error"]["message"] == message
    offline = no_daemon_config(tmp_path)
    for config in (setup.config, offline):
        for query in ("", "  "):
            refused = vaultd("search", query, config=config)
            assert (refused.returncode, refused.stderr) == (2, f"vaultd: {message}\n")
            assert refused.stdout == ""


def distinct_words(n: int) -> str:
    """`n` distinct words, none a stop word: "zqa zqb ..." (base 26)."""

    def word(i: int) -> str:
        letters = ""
        while True:
            i, r = divmod(i, 26)
            letters += chr(ord("a") + r)
            if not i:
                return "zq" + letters

    return " ".join(word(i) for i in range(n))


def test_queries_over_the_caps_are_400_and_at_the_caps_are_searched(setup: Setup) -> None:
    from vaultd.query import MAX_QUERY_CHARS, MAX_QUERY_TERMS

    assert len(distinct_words(MAX_QUERY_TERMS)) <= MAX_QUERY_CHARS
    assert post(setup.sock, "/v1/search", {"query": distinct_words(MAX_QUERY_TERMS)}).status == 200
    too_many = post(setup.sock, "/v1/search", {"query": distinct_words(MAX_QUERY_TERMS + 1)})
    assert_error(too_many, 400, "bad_request")
    assert f"has {MAX_QUERY_TERMS + 1} search terms" in too_many.body["error"]["message"]
    # Stop words and repeats cost nothing more, and do not count.
    padded = distinct_words(MAX_QUERY_TERMS) + " the and of" + " zqa" * 100
    assert post(setup.sock, "/v1/search", {"query": padded}).status == 200
    # Text without spaces: every two characters a term.
    han = "".join(chr(0x4E00 + i) for i in range(300))  # 299 distinct pairs, and the run
    unspaced = post(setup.sock, "/v1/search", {"query": han})
    assert_error(unspaced, 400, "bad_request")
    long = post(setup.sock, "/v1/search", {"query": "garden " * 1000})
    assert_error(long, 400, "bad_request")
    assert f"at most {MAX_QUERY_CHARS} are searched" in long.body["error"]["message"]
    # The case: a body-sized query of distinct words, refused before any work.
    huge = post(setup.sock, "/v1/search", {"query": distinct_words(120_000)[: MAX_BODY - 100]})
    assert_error(huge, 400, "bad_request")
    assert call(setup.sock, "GET", "/v1/health").body["status"] == "ok"


def test_the_cli_refuses_a_query_over_the_caps_with_the_daemons_message(
    setup: Setup, tmp_path: Path
) -> None:
    from vaultd.query import MAX_QUERY_TERMS

    query = distinct_words(MAX_QUERY_TERMS + 1)
    message = post(setup.sock, "/v1/search", {"query": query}).body["error"]["message"]
    for config in (setup.config, no_daemon_config(tmp_path)):
        refused = vaultd("search", query, config=config)
        assert (refused.returncode, refused.stderr) == (2, f"vaultd: {message}\n")
