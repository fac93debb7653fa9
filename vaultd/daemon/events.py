"""The daemon's event hub: what happens as it happens, for `GET /v1/events` and the page.

The worker publishes (a note indexed, failed or deleted, a phase of a pass begun or moved on, a
pass done); each reader of the stream holds a subscription with a bounded buffer of its own.
Publishing never waits for a reader: when a reader's buffer is full its oldest event is
dropped and counted, both for the reader (each event it does get says how many it lost) and
for the hub (status and the page report the total). The server's readers await their events on
its event loop (`EventStream.__anext__`), woken from the publishing thread, so an open stream
holds no thread. A reader that hangs up is unsubscribed by the server as soon as its connection
says so (`EventStream.end`), one that vanished silently at the first write to it that fails, at
the latest at the next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: Events a reader may fall behind by before its oldest are dropped.
BUFFER = 1024
#: Readers at once; a new one past it ends the oldest's stream.
MAX_READERS = 32
#: Seconds between heartbeats on a quiet stream: how soon a vanished reader is noticed.
HEARTBEAT = 15.0


class Subscription:
    """One reader's place: a bounded buffer and what it lost."""

    def __init__(self, hub: EventHub, size: int) -> None:
        self._hub = hub
        self._events: deque[dict[str, Any]] = deque()
        self._size = size
        self._ready = threading.Condition(hub.lock)
        #: Wakes a reader awaiting on an event loop (see `get_async`).
        self._wake: Callable[[], None] | None = None
        self.dropped = 0
        self.closed = False

    def _put(self, event: dict[str, Any]) -> None:
        # Under the hub's lock.
        if len(self._events) >= self._size:
            self._events.popleft()
            self.dropped += 1
            self._hub.dropped += 1
        self._events.append(event)
        self._notify()

    def _notify(self) -> None:
        # Under the hub's lock.
        self._ready.notify()
        if self._wake is not None:
            self._wake()

    def _take(self) -> dict[str, Any] | None:
        # Under the hub's lock.
        if not self._events:
            return None
        return {**self._events.popleft(), "dropped": self.dropped}

    def get(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None when none came within `timeout` or the stream was ended."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while not self._events and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._ready.wait(left)
            return self._take()

    async def get_async(self, timeout: float) -> dict[str, Any] | None:
        """`get`, awaited on the running event loop instead of blocking a thread."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            # A loop already closed (the server stopped) has no reader left to wake.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(ready.set)

        deadline = loop.time() + timeout
        while True:
            with self._hub.lock:
                self._wake = wake
                event = self._take()
                if event is not None or self.closed:
                    return event
                ready.clear()
            left = deadline - loop.time()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await ready.wait()

    def close(self) -> None:
        self._hub.unsubscribe(self)


class EventHub:
    """Thread-safe: the worker publishes, each stream reads its own subscription (the server's
    on its event loop)."""

    def __init__(self, buffer: int = BUFFER, max_readers: int = MAX_READERS) -> None:
        self.lock = threading.Lock()
        self._buffer = buffer
        self._max_readers = max_readers
        self._readers: list[Subscription] = []
        self._seq = 0
        #: Events dropped from full buffers since start, over all readers.
        self.dropped = 0

    @property
    def readers(self) -> int:
        with self.lock:
            return len(self._readers)

    def publish(self, kind: str, **fields: Any) -> None:
        """Hand an event to every reader; never blocks on one."""
        with self.lock:
            if not self._readers:
                return
            self._seq += 1
            event = {"kind": kind, "seq": self._seq, "time": time.time(), **fields}
            for reader in self._readers:
                reader._put(event)

    def subscribe(self) -> Subscription:
        reader = Subscription(self, self._buffer)
        with self.lock:
            if len(self._readers) >= self._max_readers:
                oldest = self._readers.pop(0)
                oldest.closed = True
                oldest._notify()
            self._readers.append(reader)
        return reader

    def unsubscribe(self, reader: Subscription) -> None:
        with self.lock:
            reader.closed = True
            if reader in self._readers:
                self._readers.remove(reader)
            reader._notify()

    def close(self) -> None:
        """End every reader's stream (the daemon is stopping)."""
        with self.lock:
            readers, self._readers = self._readers, []
            for reader in readers:
                reader.closed = True
                reader._notify()

    def stream(self, heartbeat: float | None = None) -> EventStream:
        """A reader's events as they come, a `ping` after each quiet `heartbeat`."""
        return EventStream(self.subscribe(), HEARTBEAT if heartbeat is None else heartbeat)


class EventStream:
    """One reader's events, as an iterator (and an async one, for the server): `hello` first,
    then what is published, a `ping` after each quiet heartbeat. `end()` ends it from any thread,
    at once: the server calls it when the reader hangs up, so that a closed stream gives back
    its place without waiting for the next event or heartbeat to fail on the socket."""

    def __init__(self, reader: Subscription, heartbeat: float) -> None:
        self._reader = reader
        self._heartbeat = heartbeat
        self._greeted = False

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._greeted and not self._reader.closed:
            return self._or_ping(self._reader.get(self._heartbeat))
        return self._or_ping(None)

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            if self._greeted and not self._reader.closed:
                return self._or_ping(await self._reader.get_async(self._heartbeat))
            return self._or_ping(None)
        except StopIteration:
            raise StopAsyncIteration from None

    def _or_ping(self, event: dict[str, Any] | None) -> dict[str, Any]:
        """`hello` first; then `event`, a heartbeat when none came, or the end."""
        if not self._greeted:
            self._greeted = True
            return {"kind": "hello", "seq": 0, "time": time.time(), "dropped": 0}
        if event is not None:
            return event
        if self._reader.closed:
            raise StopIteration
        return {"kind": "ping", "seq": 0, "time": time.time(), "dropped": 0}

    def end(self) -> None:
        """Unsubscribe; a reader waiting in `__next__` or `__anext__` stops at once."""
        self._reader.close()

    close = end
