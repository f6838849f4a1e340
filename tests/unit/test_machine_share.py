"""The suite's machine lock: an ``exclusive`` test never overlaps another worker's test."""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace
from typing import cast

import pytest

from tests.support.machine import EXCLUSIVE, WAITED, machine_share


def item(exclusive: bool) -> pytest.Item:
    marker = object() if exclusive else None
    return cast(
        pytest.Item,
        SimpleNamespace(
            get_closest_marker=lambda name: marker if name == EXCLUSIVE else None,
            user_properties=[],
        ),
    )


def test_an_exclusive_test_waits_for_the_others_and_they_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)
    spans: dict[str, list[float]] = {}
    waited: dict[str, float] = {}

    def run(name: str, exclusive: bool, seconds: float) -> None:
        test = item(exclusive)
        with machine_share(test):
            start = time.monotonic()
            time.sleep(seconds)
            spans[name] = [start, time.monotonic()]
        waited[name] = cast(float, dict(test.user_properties)[WAITED])

    first = [threading.Thread(target=run, args=(n, False, 0.4)) for n in ("a", "b")]
    for thread in first:
        thread.start()
    time.sleep(0.1)  # both shared holders are in
    alone = threading.Thread(target=run, args=("alone", True, 0.3))
    alone.start()
    time.sleep(0.1)
    assert spans == {}  # the two shared ones ran side by side, the exclusive one waits
    for thread in first:
        thread.join()
    alone.join()
    assert spans["a"][0] < spans["b"][1] and spans["b"][0] < spans["a"][1]  # side by side
    assert spans["alone"][0] >= max(spans["a"][1], spans["b"][1])
    # what each waited is recorded for the run's summary: the exclusive one, the others' rest
    assert waited["a"] < 0.1 and waited["b"] < 0.1
    assert 0.2 <= waited["alone"] < 0.4


def test_outside_xdist_nothing_is_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    with machine_share(item(True)), machine_share(item(True)):
        pass  # a second exclusive holder in the same thread would block for ever if locked
