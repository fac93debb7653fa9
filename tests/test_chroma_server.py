"""Chroma server mode for real: `chroma run` on loopback, compared with the embedded store.

The export of a vault indexed through a server must equal the embedded store's export of the
same vault, also after the server was stopped in the middle of an index run and started again.
"""

from __future__ import annotations

import http.server
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from harness.daemon import NEVER_YIELD, PATIENCE, fault_env, short_socket_dir, start
from tests.conftest import captured_logs, shared_path
from vaultd.errors import StoreError, StoreUnavailableError
from vaultd.storage import chroma as chroma_module
from vaultd.storage.chroma import auth_headers, is_transient
from vaultd.storage.vectors import VectorStore

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

COLLECTION = "vaultd-test"
#: Generated notes beside the Sandbox: enough for the daemon to write in several batches, so the
#: server can be stopped while a run is half done.
GENERATED = 160


def chroma_binary() -> Path:
    beside = Path(sys.executable).parent / "chroma"
    found = beside if beside.exists() else shutil.which("chroma")
    assert found, "the `chroma` command (installed with chromadb) is missing"
    return Path(found)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ChromaServer:
    path: Path
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = PATIENCE) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    chroma_binary(),
                    "run",
                    "--path",
                    str(self.path),
                    "--port",
                    str(self.port),
                    "--host",
                    "127.0.0.1",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"chroma run exited with {self.process.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"chroma run did not answer its heartbeat:\n{self.logs()}")

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.process = None

    def count(self) -> int:
        """Records in the test collection, asked over the server's REST API."""
        base = self.collections
        try:
            with urllib.request.urlopen(f"{base}/{COLLECTION}", timeout=2) as r:
                collection_id = json.load(r)["id"]
            with urllib.request.urlopen(f"{base}/{collection_id}/count", timeout=2) as r:
                return int(json.load(r))
        except OSError:
            return 0

    def has_collection(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.collections}/{COLLECTION}", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def drop_collection(self) -> None:
        request = urllib.request.Request(f"{self.collections}/{COLLECTION}", method="DELETE")
        with urllib.request.urlopen(request, timeout=5):
            pass

    @property
    def collections(self) -> str:
        return f"{self.url}/api/v2/tenants/default_tenant/databases/default_database/collections"

    def logs(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:]


@contextmanager
def chroma_server(root: Path) -> Iterator[ChromaServer]:
    server = ChromaServer(root / "chroma-server", free_port(), root / "chroma.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def write_config(path: Path, vault: Path, store: Path, url: str = "", extra: str = "") -> Path:
    server = f'url = "{url}"\ncollection = "{COLLECTION}"\n' if url else ""
    path.write_text(
        f'[vault]\npath = "{vault}"\n\n[store]\npath = "{store}"\n{server}\n'
        f'[log]\nlevel = "warning"\n\n[embedding]\n{NEVER_YIELD}{extra}',
        encoding="utf-8",
    )
    return path


def vaultd(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "vaultd", *args], capture_output=True, text=True, timeout=300
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def export(config: Path) -> list[dict[str, Any]]:
    out = vaultd("export", "--with-vectors", "--config", str(config)).stdout
    return [json.loads(line) for line in out.splitlines() if line]


def assert_same_records(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    assert [r["id"] for r in mine] == [r["id"] for r in theirs]
    for a, b in zip(mine, theirs, strict=True):
        assert a["document"] == b["document"], a["id"]
        assert a["metadata"] == b["metadata"], a["id"]
        assert np.allclose(a["vector"], b["vector"], atol=1e-5), a["id"]


def write_generated(folder: Path) -> None:
    folder.mkdir()
    animals = ["otter", "heron", "badger", "lynx", "ibis", "marten", "stoat", "kestrel"]
    places = ["the river", "a beech wood", "the salt marsh", "an old quarry", "the dunes"]
    for i in range(GENERATED):
        animal, place = animals[i % len(animals)], places[i % len(places)]
        (folder / f"Sighting {i:03d}.md").write_text(
            f"---\ntags: [field/{animal}]\n---\n# Sighting {i}\n\n"
            f"Observation {i}: a {animal} was seen near {place} at {6 + i % 12} o'clock, "
            f"count {i % 7 + 1}.\n",
            encoding="utf-8",
        )


@pytest.fixture(scope="module")
def vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("server-vault") / "vault"
    shutil.copytree(shared_path("corpora", "obsidian-help", "Sandbox"), root)
    write_generated(root / "Sightings")
    return root


@pytest.fixture(scope="module")
def embedded_export(vault: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    work = tmp_path_factory.mktemp("embedded")
    config = write_config(work / "embedded.toml", vault, work / "data")
    vaultd("index", "-q", "--config", str(config))
    records = export(config)
    assert len(records) > GENERATED
    return records


def wait_for(check: Any, what: str, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def test_server_mode_survives_an_outage_mid_run_and_exports_what_embedded_does(
    vault: Path, embedded_export: list[dict[str, Any]], tmp_path: Path
) -> None:
    with chroma_server(tmp_path) as server:
        config = write_config(tmp_path / "server.toml", vault, tmp_path / "data", server.url)
        run = subprocess.Popen(
            [sys.executable, "-m", "vaultd", "index", "-q", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The collection is opened first, the vectors written once their batch is embedded:
        # stopping the server now leaves the run without it halfway, whatever the batch size.
        wait_for(server.has_collection, "vaultd opens its collection on the server")
        server.stop()
        _, stderr = run.communicate(timeout=120)
        assert run.returncode == 1, stderr
        assert "unavailable" in stderr and "Traceback" not in stderr

        # Started again on the same path and port: a re-run converges to the embedded index.
        server.start()
        vaultd("index", "-q", "--config", str(config))
        assert_same_records(export(config), embedded_export)
        # The incremental rules hold through the server too: nothing changed, nothing embedded.
        again = json.loads(vaultd("index", "--json", "-q", "--config", str(config)).stdout)
        assert again["chunks_embedded"] == 0 and again["store_repaired"] == 0
        status = json.loads(vaultd("status", "--json", "--config", str(config)).stdout)
        assert status["store"]["chroma"] == server.url


def test_daemon_degrades_while_the_server_is_away_and_converges(
    vault: Path, embedded_export: list[dict[str, Any]], tmp_path: Path
) -> None:
    with chroma_server(tmp_path) as server:
        sockets = short_socket_dir()
        socket_path = sockets / "vaultd.sock"
        config = write_config(
            tmp_path / "server.toml",
            vault,
            tmp_path / "data",
            server.url,
            extra=f'\n[server]\nsocket = "{socket_path}"\n',
        )
        # The server is stopped after the daemon's first batch landed, while the next is
        # embedded: batches of 128 chunks here (BULK_BATCH_CHUNKS is larger than this vault),
        # set in the daemon's process before it starts.
        small_batches = "from vaultd.daemon import worker\nworker.BULK_BATCH_CHUNKS = 128\n"
        env = fault_env(tmp_path, small_batches)
        assert len(embedded_export) > 128, "the vault needs two batches"
        daemon = start(config, socket_path, tmp_path / "vaultd.log", env=env, wait_ready=False)
        try:
            wait_for(lambda: server.count() > 0, "the first batch reaches the server")
            server.stop()

            def reports_outage() -> bool:
                reason = daemon.request("GET", "/v1/health").get("reason", "")
                return "unavailable" in reason

            # Retries take a few seconds before the worker gives up on the pass.
            wait_for(reports_outage, "the daemon reports the store as unavailable")
            assert daemon.process.poll() is None, daemon.log_text()
            # The keyword index is local: it still answers for what was committed.
            assert daemon.search("Sighting", k=5, mode="keyword")

            server.start()
            wait_for(
                lambda: daemon.request("GET", "/v1/health")["status"] == "ok",
                "the daemon recovers once the server is back",
            )
            daemon.wait_idle()
            hits = daemon.search("a lynx seen near the salt marsh", k=3, mode="vector")
            assert hits and hits[0]["path"].startswith("Sightings/")
        finally:
            assert daemon.stop() == 0, daemon.log_text()
            shutil.rmtree(sockets, ignore_errors=True)
        assert_same_records(export(config), embedded_export)


def test_a_daemon_started_while_the_server_is_down_waits_for_it(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Otter.md").write_text("# Otter\n\nOtters hold hands asleep.\n", encoding="utf-8")
    server = ChromaServer(tmp_path / "chroma-server", free_port(), tmp_path / "chroma.log")
    sockets = short_socket_dir()
    config = write_config(
        tmp_path / "server.toml",
        vault,
        tmp_path / "data",
        server.url,
        extra=f'\n[server]\nsocket = "{sockets / "vaultd.sock"}"\n',
    )
    daemon = start(config, sockets / "vaultd.sock", tmp_path / "vaultd.log", wait_ready=False)
    try:
        wait_for(
            lambda: "unavailable" in daemon.request("GET", "/v1/health").get("reason", ""),
            "the daemon reports the missing server",
        )
        server.start()
        wait_for(
            lambda: daemon.request("GET", "/v1/health")["status"] == "ok",
            "the daemon indexes once the server is up",
        )
        assert server.count() == 1

        # The server loses the collection (a wiped disk, a new --path): it is recreated and
        # refilled from the manifest on the next pass, without embedding anything again.
        embedded_before = daemon.request("GET", "/v1/status")["embedded_total"]
        server.drop_collection()
        daemon.request("POST", "/v1/reindex", {})
        wait_for(lambda: server.count() == 1, "the lost collection is refilled")
        assert daemon.request("GET", "/v1/status")["embedded_total"] == embedded_before
    finally:
        server.stop()
        assert daemon.stop() == 0, daemon.log_text()
        shutil.rmtree(sockets, ignore_errors=True)


# -- the token -------------------------------------------------------------------------------


def retries(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    """The store's log lines for a retried server operation."""
    return [entry for entry in logs if entry["event"] == "Chroma server failed; retrying"]


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        body = b'{"error": "AuthError", "message": "no"}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_token_is_sent_as_a_bearer_header_and_a_refusal_is_not_retried(
    tmp_path: Path,
) -> None:
    assert auth_headers("") is None
    assert auth_headers("s3cret") == {"Authorization": "Bearer s3cret"}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Recorder.seen = []
    try:
        with captured_logs() as logs, pytest.raises(StoreError, match="refused the credentials"):
            VectorStore(
                collection=COLLECTION,
                vault_id="/v",
                model_id="m",
                url=f"http://127.0.0.1:{httpd.server_address[1]}",
                token="s3cret",
            )
        assert retries(logs) == [], "an authentication failure must not be retried"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
    assert _Recorder.seen and set(_Recorder.seen) == {"Bearer s3cret"}


def test_an_unreachable_server_is_retried_then_deferred(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing listens: the store opens lazily, and each use fails after bounded retries."""
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr(chroma_module, "RETRY_FIRST_DELAY", 0.1)
    store = VectorStore(collection=COLLECTION, vault_id="/v", model_id="m", url=url)
    with (
        captured_logs() as logs,
        pytest.raises(StoreUnavailableError, match="unavailable after 4 tries"),
    ):
        store.count()
    # Three retries, after pauses doubling from the first (0.1, 0.2, 0.4 s here), plus up to
    # a quarter of jitter: read from the retries' own log lines, not from a clock that a busy
    # machine stretches.
    tried = retries(logs)
    assert [entry["attempt"] for entry in tried] == [1, 2, 3]
    assert len({entry["operation"] for entry in tried}) == 1
    for entry, base in zip(tried, (100, 200, 400), strict=True):
        assert base <= entry["pause_ms"] <= base * 1.25, tried


def test_transient_errors_are_told_from_permanent_ones() -> None:
    import httpx
    from chromadb.errors import InternalError, InvalidArgumentError, RateLimitError

    request = httpx.Request("GET", "http://x/")
    assert is_transient(httpx.ConnectError("refused", request=request))
    assert is_transient(httpx.ReadTimeout("slow", request=request))
    assert is_transient(InternalError("boom")) and is_transient(RateLimitError("later"))
    assert not is_transient(InvalidArgumentError("bad"))
    try:
        try:
            raise httpx.HTTPStatusError(
                "503", request=request, response=httpx.Response(503, request=request)
            )
        except httpx.HTTPStatusError:
            raise Exception("Service Unavailable") from None  # how chromadb raises unknown bodies
    except Exception as exc:
        assert is_transient(exc)
    assert not is_transient(ValueError("a bug"))


def test_a_batch_bigger_than_the_servers_request_limit_is_sent_in_slices(tmp_path: Path) -> None:
    # Found on obsidian-hub: notes listing hundreds of links repeat them in every chunk's
    # metadata, and one upsert of such chunks is refused with "Payload too large".
    rng = np.random.default_rng(7)
    count = 1000
    vectors = rng.standard_normal((count, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    links = [f"Community plugin number {i} with a long name" for i in range(400)]
    ids = [f"{i:05d}" for i in range(count)]
    documents = [f"Passage {i} of a long list of plugins." for i in range(count)]
    metadatas = [{"path": f"list{i // 100}.md", "links": links} for i in range(count)]
    with chroma_server(tmp_path) as server:
        store = VectorStore(collection=COLLECTION, vault_id="/vault", model_id="m", url=server.url)
        try:
            store.upsert(ids, vectors, documents, metadatas)  # about 25 MB of JSON
            assert server.count() == count
            assert store.ids() == set(ids)
            # The server's collection searches as widely as an embedded one (SEARCH_EF).
            queries = rng.standard_normal((20, 384)).astype(np.float32)
            found = sum(
                len(
                    {ids[i] for i in np.argsort(-(vectors @ q))[:100]}
                    & dict(store.query(q, 100)).keys()
                )
                for q in queries
            )
            assert found / (100 * len(queries)) >= 0.995
        finally:
            store.close()
