"""``chronos run`` freezes what start-up imported and built before the node's loops start: a
full collection no longer walks it (its pauses held the GIL and made timers late)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from chronos.node import supervisor
from tests.unit.helpers import settings


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_start_up_objects_are_frozen_before_the_node_starts(
    monkeypatch: pytest.MonkeyPatch, unfrozen: None
) -> None:
    seen: dict[str, int] = {}

    class StoppedAtOnce:
        def __init__(self, _settings: Any) -> None:
            pass

        def request_stop(self) -> None:
            pass

        def start(self, *, check_broker: bool) -> bool:
            seen["frozen"] = gc.get_freeze_count()
            return False  # stopped while waiting for a dependency

        def shutdown(self) -> int:
            return 0

    monkeypatch.setattr(supervisor, "Node", StoppedAtOnce)
    monkeypatch.setattr(supervisor, "expose_process", lambda _name: None)
    monkeypatch.setattr(supervisor, "relay_signals", lambda _act: None)
    assert gc.get_freeze_count() == 0

    assert supervisor.run_node(settings()) == 0

    assert seen["frozen"] > 1000  # the modules, at least
