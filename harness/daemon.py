"""Start a real `vaultd run` in a subprocess and talk to it over its real socket."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vaultd.api.client import Client
from vaultd.api.limits import MAX_WAIT
from vaultd.errors import DaemonError

#: How long a test waits for the daemon before calling it a failure: generous, because the
#: machines that run the suite are shared and loaded, and the limit only bounds a failure.
PATIENCE = 120.0


def short_socket_dir() -> Path:
    """Unix socket paths must stay short; pytest's tmp_path often is not. Removed when the
    test process exits (pytest cleans only its own tmp_path)."""
    path = Path(tempfile.mkdtemp(prefix="vd-", dir="/tmp"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@dataclass
class RunningDaemon:
    process: subprocess.Popen[bytes]
    config: Path
    socket: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def client(self) -> Client:
        return Client(self.socket, timeout=90)

    def request(self, method: str, target: str, body: Any = None) -> Any:
        return self.client.request(method, target, body)

    def search(self, query: str, **options: Any) -> list[dict[str, Any]]:
        """POST /v1/search. With `wait_for`, `timeout` (PATIENCE unless given) is the whole
        wait: the server bounds one request's wait by MAX_WAIT, so a longer one is several."""
        body = {"query": query, **options}
        deadline = time.monotonic() + float(body.get("timeout", PATIENCE))
        while True:
            if "wait_for" in body:
                body["timeout"] = min(max(0.0, deadline - time.monotonic()), MAX_WAIT)
            try:
                hits: list[dict[str, Any]] = self.request("POST", "/v1/search", body)["hits"]
            except DaemonError as exc:
                if "wait_for" not in body or exc.code != "timeout":
                    raise
                if time.monotonic() >= deadline:
                    raise
                continue
            return hits

    def wait_idle(self, timeout: float = PATIENCE) -> None:
        """Wait until the daemon has nothing queued or in hand (what it knows of: events
        still on their way from the kernel are not known yet)."""
        self.search("x", k=1, wait_for="idle", timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = PATIENCE) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def fault_env(tmp_path: Path, source: str, **settings: str) -> dict[str, str]:
    """The environment that makes a daemon load `source` as its `sitecustomize` (a fault
    injected at a level a test cannot reach for real: a libc call, the mount table), with
    `settings` as further variables."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(source)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **settings}


def wait_until(condition: Callable[[], bool], what: str, timeout: float = PATIENCE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


#: Bulk work (a first index, a full reconcile) waits while other programs keep the cores busy
#: (`[embedding] yield_above`), for as long as they do: on a loaded machine a test would wait
#: for the machine, not for the daemon. Tests of that rule set their own.
NEVER_YIELD = "yield_above = 1.0\n"


def write_config(
    path: Path, vault: Path, store: Path, socket: Path, *, debounce: str = "200ms", extra: str = ""
) -> Path:
    if "yield_above" not in extra:
        if "[embedding]\n" in extra:
            extra = extra.replace("[embedding]\n", f"[embedding]\n{NEVER_YIELD}", 1)
        else:
            extra += f"\n[embedding]\n{NEVER_YIELD}"
    path.write_text(
        f'[vault]\npath = "{vault}"\n\n[store]\npath = "{store}"\n\n'
        f'[server]\nsocket = "{socket}"\n\n[watch]\ndebounce = "{debounce}"\n\n'
        f'[log]\nlevel = "info"\nformat = "json"\n{extra}',
        encoding="utf-8",
    )
    return path


def start(
    config: Path,
    socket: Path,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    ready_timeout: float = PATIENCE,
    wait_ready: bool = True,
) -> RunningDaemon:
    full_env = {**os.environ, **(env or {})}
    handle = log.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "vaultd", "run", "--config", str(config)],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=full_env,
    )
    handle.close()
    daemon = RunningDaemon(process, config, socket, log, full_env)
    # Wait for the socket; with wait_ready, also for the first reconcile.
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vaultd run exited with {process.returncode}:\n{daemon.log_text()}")
        if daemon.client.reachable():
            try:
                health = daemon.request("GET", "/v1/health")
            except Exception:
                health = {}
            if health.get("status") == "ok" or (health and not wait_ready):
                return daemon
        time.sleep(0.1)
    daemon.stop(signal.SIGKILL)
    raise RuntimeError(f"vaultd run did not become ready:\n{daemon.log_text()}")


@contextmanager
def running(
    vault: Path,
    workdir: Path,
    *,
    debounce: str = "200ms",
    extra: str = "",
    env: dict[str, str] | None = None,
    wait_ready: bool = True,
) -> Iterator[RunningDaemon]:
    """A daemon on `vault`, serving (and with `wait_ready` done with its first reconcile)."""
    sockets = short_socket_dir()
    socket = sockets / "vaultd.sock"
    config = write_config(
        workdir / "vaultd.toml", vault, workdir / "data", socket, debounce=debounce, extra=extra
    )
    daemon = start(config, socket, workdir / "vaultd.log", env=env, wait_ready=wait_ready)
    try:
        yield daemon
    finally:
        if daemon.process.poll() is None:
            daemon.stop()


def copy_built_models(source: Path, target: Path) -> None:
    """The finished files of a models cache that other test processes may be writing to (a
    build's `.partial` files come and go meanwhile)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in source.glob("*"):
        if path.is_file() and not path.name.endswith(".partial"):
            try:
                shutil.copy2(path, target / path.name)
            except FileNotFoundError:
                continue  # replaced or removed while listed
