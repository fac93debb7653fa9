from __future__ import annotations

from pathlib import Path

import pytest

from vaultd.embedding.spec import default_spec
from vaultd.embedding.tokens import TokenCounter

#: Real vaults written by others, beside the checkout; never copied into the repository.
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or a skip that says why when the folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared corpora are not beside this checkout")
    return path


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return TokenCounter.for_spec(default_spec())


class FakeClock:
    """A monotonic clock the test moves by hand (`clock.now += 5`)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
