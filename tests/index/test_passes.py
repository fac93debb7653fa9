"""index/passes: the pause point of the pass in hand, restored when a nested pass ends and
throttled during hashing."""

from __future__ import annotations

import pytest

from vaultd.index import passes
from vaultd.index.passes import Pauses


def test_a_nested_pass_gives_the_outer_its_pause_point_back() -> None:
    calls: list[tuple[str, frozenset[str]]] = []
    pauses = Pauses()
    pauses(frozenset({"none"}))  # no pass in hand: nothing to call
    with pauses.during(lambda held: calls.append(("outer", held))):
        pauses(frozenset({"a.md"}))
        with pauses.during(lambda held: calls.append(("inner", held))):
            pauses(frozenset())
        pauses(frozenset({"b.md"}))
    assert calls == [
        ("outer", frozenset({"a.md"})),
        ("inner", frozenset()),
        ("outer", frozenset({"b.md"})),
    ]
    assert pauses.point is None


def test_a_throttled_call_right_after_another_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # An hour between pauses: on a busy machine two statements can be more than the shipped
    # quarter of a second apart, and "right after" must not depend on the scheduler.
    monkeypatch.setattr(passes, "PAUSE_EVERY", 3600.0)
    calls: list[bool] = []
    pauses = Pauses()
    with pauses.during(lambda held: calls.append(True)):
        pauses(frozenset(), throttle=True)
        # Well within PAUSE_EVERY of the first: hashing does not stop for it.
        pauses(frozenset(), throttle=True)
        assert len(calls) == 1
        pauses(frozenset())  # unthrottled: always called
    assert len(calls) == 2
