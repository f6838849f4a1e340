"""Loops retry database errors (StoreError) but not programming bugs: a bug must stop the node
(the orchestrator restarts it, the logs show it), not be counted as a database error and
retried for ever."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from chronos.cluster.recovery import RecoveryLoop
from chronos.errors import StoreError
from chronos.testing import InMemoryStore, unfenced
from tests.unit.helpers import Firing, settings


def _database_errors(operation: str) -> float:
    value = REGISTRY.get_sample_value("chronos_database_errors_total", {"operation": operation})
    return value or 0.0


def test_a_store_error_in_the_claim_is_retried_later() -> None:
    f = Firing.create()
    f.store.fail_next(1, "claim_due")
    before = _database_errors("claim")
    f.loop.step()  # no exception: the claim backs off
    assert _database_errors("claim") == before + 1


def test_a_bug_in_the_claim_is_not_taken_for_a_database_error() -> None:
    f = Firing.create()

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a programming bug")

    f.store.claim = broken  # type: ignore[method-assign]
    before = _database_errors("claim")
    with pytest.raises(TypeError):
        f.loop.step()
    assert _database_errors("claim") == before


def test_a_bug_in_the_failure_detector_stops_its_loop() -> None:
    store = InMemoryStore()

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyError("a programming bug")

    config = settings()
    leadership = unfenced(config.node_id)
    leadership.elected(config.node_id)
    loop = RecoveryLoop(config, store, leadership)
    loop.run_once = broken  # type: ignore[method-assign]
    with pytest.raises(KeyError):
        loop.run()


def test_a_store_error_in_the_failure_detector_is_retried() -> None:
    store = InMemoryStore()
    config = settings(failure_detection_interval_ms=10)
    leadership = unfenced(config.node_id)
    leadership.elected(config.node_id)
    loop = RecoveryLoop(config, store, leadership)
    calls: list[int] = []

    def flaky(*_args: Any, **_kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) >= 3:
            loop.stop()
        raise StoreError("connection lost")

    loop.run_once = flaky  # type: ignore[method-assign]
    loop.run()  # returns once stopped: the errors were retried, not raised
    assert len(calls) == 3
