"""`GET /v1/events`: the hub's bounded buffers on their own, then a real daemon's stream read by
a real client over its real socket, with readers that stall or vanish beside it."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.daemon import PATIENCE, RunningDaemon, running, wait_until
from harness.vaults import write_vault
from vaultd.daemon.events import EventHub

DEBOUNCE = 0.2


# -- the hub alone -------------------------------------------------------------------------------


def test_a_full_buffer_drops_the_oldest_and_counts_them_without_waiting() -> None:
    hub = EventHub(buffer=4)
    stream = hub.stream(heartbeat=0.05)
    assert next(stream)["kind"] == "hello"
    started = time.monotonic()
    for n in range(10):
        hub.publish("note_indexed", path=f"{n}.md")
    assert time.monotonic() - started < 0.5  # nobody read: publishing never waited
    got = [next(stream) for _ in range(4)]
    assert [e["path"] for e in got] == ["6.md", "7.md", "8.md", "9.md"]
    assert {e["dropped"] for e in got} == {6}
    assert hub.dropped == 6
    assert next(stream)["kind"] == "ping"  # quiet: a heartbeat
    stream.close()
    assert hub.readers == 0


def test_readers_past_the_cap_end_the_oldest_and_close_ends_them_all() -> None:
    hub = EventHub(max_readers=2)
    first, second, third = (hub.stream(heartbeat=5) for _ in range(3))
    for s in (first, second, third):
        next(s)
    assert hub.readers == 2
    assert list(first) == []  # ended: the newest took its place
    hub.close()
    assert list(second) == [] and list(third) == []
    assert hub.readers == 0


# -- a real daemon -------------------------------------------------------------------------------


class EventReader:
    """A client of the event stream on a raw socket, parsing the events as they arrive."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(PATIENCE)
        self.sock.connect(str(path))
        self.sock.sendall(b"GET /v1/events HTTP/1.1\r\nHost: vaultd\r\n\r\n")
        self.file = self.sock.makefile("rb")
        status = self.file.readline()
        assert status.startswith(b"HTTP/1.1 200"), status
        self.headers: dict[str, str] = {}
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            self.headers[name.strip().lower()] = value.strip()

    def events(self) -> Iterator[dict[str, Any]]:
        fields: dict[str, str] = {}
        for raw in self.file:
            line = raw.decode().rstrip("\n")
            if not line:
                if "data" in fields:
                    event = json.loads(fields["data"])
                    assert event["kind"] == fields["event"]
                    yield event
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@contextmanager
def idle_daemon(root: Path) -> Iterator[RunningDaemon]:
    vault = write_vault(root / "vault")
    with running(vault, root, debounce=f"{int(DEBOUNCE * 1000)}ms") as d:
        d.wait_idle()
        yield d


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """One daemon for the cases that leave it running: each edits notes of its own."""
    with idle_daemon(tmp_path_factory.mktemp("events")) as d:
        yield d


@pytest.fixture
def daemon(shared: RunningDaemon) -> RunningDaemon:
    """The shared daemon, done with what the case before it asked."""
    shared.wait_idle()
    return shared


def test_an_edited_notes_event_arrives_once_it_is_searchable(daemon: RunningDaemon) -> None:
    reader = EventReader(daemon.socket)
    try:
        assert reader.headers["content-type"].startswith("text/event-stream")
        events = reader.events()
        assert next(events)["kind"] == "hello"
        vault = _vault_of(daemon)
        edited = time.monotonic()
        (vault / "Garden" / "Compost.md").write_text(
            "# Compost\n\nTurn the compost pile weekly; add coffee grounds.\n", encoding="utf-8"
        )
        seen: list[dict[str, Any]] = []
        for event in events:
            seen.append(event)
            if event["kind"] == "note_indexed" and event["path"] == "Garden/Compost.md":
                break
        arrived = time.monotonic() - edited
        done = next(events)
        assert done["kind"] == "pass_done" and done["full"] is False
        assert done["summary"]["notes_changed"] == 1
        assert 0 < done["lag_seconds"] < PATIENCE
        # The debounce window, plus the one note's indexing (generous on a loaded machine).
        print(f"note_indexed {arrived * 1000:.0f} ms after the write, debounce {DEBOUNCE} s")
        assert arrived < DEBOUNCE + 10.0, seen
        assert daemon.search("coffee grounds", k=1)[0]["path"] == "Garden/Compost.md"
    finally:
        reader.close()


def test_a_failed_and_a_deleted_note_are_told(daemon: RunningDaemon) -> None:
    reader = EventReader(daemon.socket)
    try:
        events = reader.events()
        next(events)
        vault = _vault_of(daemon)
        (vault / "Kitchen" / "Bread Recipe.md").unlink()
        (vault / "Broken.md").write_bytes(b"\xff\xfe not text \x00\x00")
        told: dict[str, dict[str, Any]] = {}
        for event in events:
            if event.get("path"):
                told[event["path"]] = event
            if {"Kitchen/Bread Recipe.md", "Broken.md"} <= set(told):
                break
        assert told["Kitchen/Bread Recipe.md"]["kind"] == "note_deleted"
        assert told["Broken.md"]["kind"] == "note_failed"
        assert told["Broken.md"]["reason"]
    finally:
        reader.close()


def test_a_stalled_or_vanished_reader_never_holds_the_daemon_up(
    daemon: RunningDaemon,
) -> None:
    # One reader that never reads, with the smallest receive buffer; one that goes away.
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    stalled.connect(str(daemon.socket))
    stalled.sendall(b"GET /v1/events HTTP/1.1\r\nHost: vaultd\r\n\r\n")
    vanished = EventReader(daemon.socket)
    vanished.sock.shutdown(socket.SHUT_RDWR)
    vanished.close()
    live = EventReader(daemon.socket)
    try:
        events = live.events()
        next(events)
        wait_until(lambda: daemon.request("GET", "/v1/status")["events"]["readers"] >= 2, "read")
        vault = _vault_of(daemon)
        # Several times the events the stalled reader's socket holds (a few hundred): its
        # server thread waits on its write, and never the daemon. One text (and title) in
        # every note: one vector to compute, not a thousand.
        many = 1000
        folder = vault / "Many"
        folder.mkdir()
        for n in range(many):
            (folder / f"Note {n}.md").write_text(
                "# Lantern\n\nA passage about lanterns, the same in every note.\n",
                encoding="utf-8",
            )
        indexed: set[str] = set()
        for event in events:
            if event["kind"] == "note_indexed" and event["path"].startswith("Many/"):
                indexed.add(event["path"])
            # The live reader may lose a few in a batch's burst too: it is told how many.
            if len(indexed) + event["dropped"] >= many:
                break
        assert len(indexed) > many // 2
        started = time.monotonic()
        assert daemon.search("lanterns", k=3, mode="keyword")
        assert time.monotonic() - started < 10.0
        # The vanished reader is gone at its first write; the stalled one is cut once a write
        # to it has waited the server's IDLE_TIMEOUT (its buffer dropping and counting what
        # comes meanwhile), while the live one reads on.
        wait_until(
            lambda: daemon.request("GET", "/v1/status")["events"]["readers"] == 1,
            "the stalled reader cut",
        )
        assert daemon.process.poll() is None
    finally:
        live.close()
        stalled.close()


def test_a_closed_stream_gives_back_its_place_at_once(daemon: RunningDaemon) -> None:
    """A stream's place was held until its next event or heartbeat (up to 15 s) failed to
    write: 20 readers that closed, then connect-and-close cycles, and every new stream was
    refused `busy` (issue 51, finding 10). A hang-up now ends the stream when it happens."""
    readers = lambda: daemon.request("GET", "/v1/status")["events"]["readers"]  # noqa: E731
    wait_until(lambda: readers() == 0, "no reader from an earlier case")
    for _ in range(20):
        closed = EventReader(daemon.socket)
        assert next(closed.events())["kind"] == "hello"
        closed.close()
    for cycle in range(500):
        try:
            reader = EventReader(daemon.socket)
        except AssertionError as refused:
            pytest.fail(f"cycle {cycle}: a new stream was refused: {refused}")
        assert next(reader.events())["kind"] == "hello"
        reader.close()
    wait_until(lambda: readers() == 0, "every closed stream unsubscribed", timeout=5.0)


def test_events_are_declared_like_every_other_operation(daemon: RunningDaemon) -> None:
    document = daemon.request("GET", "/openapi.json")
    answer = document["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    assert "text/event-stream" in answer
    assert "note_indexed" in json.dumps(answer)


def _vault_of(daemon: RunningDaemon) -> Path:
    return Path(daemon.request("GET", "/v1/health")["vault"])


def test_streams_end_when_the_daemon_stops(tmp_path: Path) -> None:
    # A daemon of its own: the case stops it.
    with idle_daemon(tmp_path) as daemon:
        reader = EventReader(daemon.socket)
        ended = threading.Event()

        def drain() -> None:
            for _ in reader.events():
                pass
            ended.set()

        thread = threading.Thread(target=drain, daemon=True)
        thread.start()
        try:
            assert daemon.stop() == 0
            assert ended.wait(PATIENCE)
        finally:
            reader.close()
