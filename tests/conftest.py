from __future__ import annotations

import logging
import os
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from tests import leftovers
from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter

#: Marked at import, before any test starts a process: each pytest process (each xdist
#: worker) has its own mark, inherited by all it starts.
_MARK = leftovers.mark_this_process()
#: How long processes started by tests may take to end after the last test (a daemon stopping,
#: orphaned workers noticing): generous, it only bounds a failure.
LEFTOVER_PATIENCE = 30.0

#: Real vaults written by others, beside the checkout; never copied into the repository.
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip that says why when the folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared corpora are not beside this checkout")
    return path


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Fail the run when a process started by its tests outlives them (then stop it)."""
    yield
    from multiprocessing import resource_tracker

    # This process's own resource tracker (tests that run a parser pool here) ends with it.
    own = getattr(resource_tracker._resource_tracker, "_pid", None)
    keep = set() if own is None else {own}
    left = leftovers.started_by_this_process(_MARK, keep)
    running = leftovers.wait_gone([p.pid for p in left], LEFTOVER_PATIENCE)
    if running:
        leftovers.kill(running)
        listed = "\n".join(f"  {p.pid}: {p.command}" for p in left if p.pid in running)
        pytest.fail(f"processes started by the tests outlived them (now killed):\n{listed}")


@pytest.fixture(autouse=True)
def no_options_carried_over() -> Iterator[None]:
    """The --config and --vault a command was given are kept for its messages' suggestions
    (vaultd.hints), once per process in real use; a test that runs a command in this process
    must not lend its options to the next test's messages."""
    from vaultd import hints

    hints.given(None, None)
    yield
    hints.given(None, None)


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return TokenCounter.for_spec(default_spec())


class FakeClock:
    """A monotonic clock the test moves by hand (`clock.now += 5`)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextmanager
def captured_logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """structlog's `capture_logs`, at every level: a test before this one in the same process
    may have configured a level (`[log] level = "error"`) that filters out what this one looks
    for before any processor sees it. The configuration is restored after."""
    previous = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**previous)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker more than the cores, up to four: a fifth of the suite's time is spent
    waiting on daemons, sockets and child processes, which another worker fills."""
    return min(4, (os.cpu_count() or 1) + 1)


#: The longest test files, longest first, from `pytest --durations` (figures in the commit that
#: last changed this list). xdist hands out whole files (`--dist loadfile`) in collection order
#: (`--no-loadscope-reorder`; its default order is by number of tests, which sends a few-test
#: file that runs for minutes last, leaving one worker busy while the others are done), so these
#: start first and the many short files fill in around them. A file not listed keeps its place.
LONGEST_FIRST = (
    "tests/test_daemon.py",
    "tests/test_multilingual.py",
    "tests/test_chroma_server.py",
    "tests/test_derive.py",
    "tests/reliability/test_poison.py",
    "tests/test_index.py",
    "tests/test_corpus.py",
    "tests/test_desks.py",
    "tests/test_index_interrupt.py",
    "tests/test_attachments_vault.py",
    "tests/reliability/test_limits.py",
    "tests/test_first_hour.py",
    "tests/test_ui_browser.py",
    "tests/test_attachments_daemon.py",
    "tests/pipeline/test_ocr.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))
