"""Parsing in worker processes (issue 21): the keyword phase of a big pass on every core.

Real spawned workers with the real tokenizer: what they make of a note is what this process
makes of it; a note that kills its worker is failed alone and the rest are parsed; workers
that cannot start leave the pool parsing in this process.
"""

from __future__ import annotations

import os
import signal

import pytest

import vaultd.index.parsers as parsers
from tests.conftest import captured_logs
from vaultd.embedding.spec import ModelSpec, load_spec
from vaultd.embedding.tokens import TokenCounter
from vaultd.index.parsers import CRASHED, ParserPool, parse_and_chunk
from vaultd.records import Parsed

MAX_BYTES = 64 * 1024
MAX_TOKENS = 128
KILLER = b"qq-kills-the-parser-qq"


def notes() -> list[tuple[str, bytes]]:
    long = "\n\n".join(f"Paragraph {i} about otters and rivers, " * 12 for i in range(30))
    out = [
        ("plain.md", b"# Otters\n\nOtters hold hands while they sleep.\n"),
        ("front.md", b"---\ntags: [a, b/c]\naliases: Otter\n---\n# T\n\nSee [[plain]].\n"),
        ("long.md", f"# Long\n\n{long}\n".encode()),
        ("zh.md", "# 水獭\n\n水獭睡觉时会牵着手。\n".encode()),
        ("binary.md", b"\x00\x01 not text"),
        ("huge.md", b"x" * (MAX_BYTES + 1)),
    ]
    out += [(f"n{i:03}.md", f"# Note {i}\n\nWords of note {i}.\n".encode()) for i in range(40)]
    return out


def here(counter: TokenCounter, path: str, data: bytes) -> Parsed:
    return parse_and_chunk(path, data, counter, max_bytes=MAX_BYTES, max_tokens=MAX_TOKENS)


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    return load_spec("default")


def test_workers_make_of_each_note_what_this_process_does(spec: ModelSpec) -> None:
    counter = TokenCounter.for_spec(spec)
    with ParserPool(spec, max_bytes=MAX_BYTES, max_tokens=MAX_TOKENS, processes=2) as pool:
        got = list(pool.parse_all(notes(), lambda item: item))
        assert pool.starts == 1 and not pool.in_process
        # Their CPU time is reported, so that the daemon's pacing counts it as its own.
        assert pool.cpu_seconds > 0
    assert [item[0] for item, _ in got] == [path for path, _ in notes()]  # in order
    for (path, data), parsed in got:
        assert parsed == here(counter, path, data), path
    outcomes = {item[0]: parsed for item, parsed in got}
    assert outcomes["binary.md"] is not None and outcomes["binary.md"].kind == "binary"
    assert outcomes["huge.md"] is not None and outcomes["huge.md"].kind == "too_big"
    assert outcomes["long.md"] is not None and len(outcomes["long.md"].chunks) > 5


def test_an_item_without_a_job_passes_through_in_its_place(spec: ModelSpec) -> None:
    items = [("a.md", b"# A\n\nalpha\n"), None, ("b.md", b"# B\n\nbeta\n")]
    with ParserPool(spec, max_bytes=MAX_BYTES, max_tokens=MAX_TOKENS, processes=1) as pool:
        got = list(pool.parse_all(items, lambda item: item))
    assert [item for item, _ in got] == items
    assert got[1][1] is None
    assert got[0][1] is not None and got[0][1].note is not None


def _crash_on_marker(path: str, data: bytes, counter: object, **limits: int) -> Parsed:
    if KILLER in data:
        os.kill(os.getpid(), signal.SIGKILL)  # a crash in native code, as the OS sees it
    return here(counter, path, data)  # type: ignore[arg-type]


def _start_crashing_worker(spec: ModelSpec, max_bytes: int, max_tokens: int) -> None:
    parsers._start_worker(spec, max_bytes, max_tokens)
    parsers.parse_and_chunk = _crash_on_marker  # type: ignore[assignment]


class CrashingPool(ParserPool):
    initializer = staticmethod(_start_crashing_worker)


def test_a_note_that_kills_its_worker_fails_alone_and_the_rest_are_parsed(
    spec: ModelSpec,
) -> None:
    items = notes()
    items.insert(20, ("killer.md", b"# Killer\n\n" + KILLER + b"\n"))
    with CrashingPool(spec, max_bytes=MAX_BYTES, max_tokens=MAX_TOKENS, processes=2) as pool:
        got = {item[0]: parsed for item, parsed in pool.parse_all(items, lambda item: item)}
        # One restart after the crash in the crowd, one after the killer's crash alone.
        assert pool.starts == 3 and not pool.in_process
    assert len(got) == len(items)
    killed = got.pop("killer.md")
    assert killed is not None and killed.reason == CRASHED and killed.note is None
    counter = TokenCounter.for_spec(spec)
    for path, data in notes():
        assert got[path] == here(counter, path, data), path


def _cannot_start(spec: ModelSpec, max_bytes: int, max_tokens: int) -> None:
    os._exit(3)  # as a worker that re-runs an unguarded script and fails there


class UnstartablePool(ParserPool):
    initializer = staticmethod(_cannot_start)


def test_workers_that_cannot_start_leave_the_pool_parsing_in_this_process(
    spec: ModelSpec,
) -> None:
    with (
        captured_logs() as logs,
        UnstartablePool(spec, max_bytes=MAX_BYTES, max_tokens=MAX_TOKENS, processes=2) as pool,
    ):
        got = list(pool.parse_all(notes(), lambda item: item))
        assert pool.in_process
    counter = TokenCounter.for_spec(spec)
    for (path, data), parsed in got:
        assert parsed == here(counter, path, data), path
    assert any("could not start" in entry["event"] for entry in logs), logs
