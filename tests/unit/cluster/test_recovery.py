"""Failure detection and recovery, at the boundaries of the hold time (manual clock)."""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from chronos.cluster.recovery import RecoveryLoop
from chronos.errors import StoreError
from chronos.testing import InMemoryStore, ManualClock, unfenced
from tests.support.store_contract import msg
from tests.unit.helpers import settings

HOLD = 3000


def _setup(count: int = 1, batch: int = 5000) -> tuple[ManualClock, InMemoryStore, RecoveryLoop]:
    clock = ManualClock()
    store = InMemoryStore(clock)
    store.enqueue(
        [msg(f"m{i}", clock.now() + timedelta(milliseconds=100)) for i in range(count)], 0
    )
    config = settings(hold_time_ms=HOLD, lookahead_ms=500, delivery_timeout_ms=1000)
    leadership = unfenced(config.node_id)
    leadership.elected(config.node_id)  # the only node: the leader
    loop = RecoveryLoop(config, store, leadership, batch)
    return clock, store, loop


def test_a_claim_is_left_alone_up_to_the_hold_time_and_reset_after() -> None:
    clock, store, loop = _setup()
    dead = str(uuid.uuid4())
    store.claim(dead, 1000, 10, 10)
    clock.advance(HOLD)
    assert loop.sweep() == 0  # exactly the hold time: the owner may still fire it
    assert store.claimed()
    clock.advance(0.001)
    assert loop.sweep() == 1
    assert store.claimed() == []
    assert store.get("m0") is not None  # reset to waiting, not lost


def test_reset_is_logged_as_a_suspected_failure(caplog: pytest.LogCaptureFixture) -> None:
    clock, store, loop = _setup()
    dead = str(uuid.uuid4())
    store.claim(dead, 1000, 10, 10)
    clock.advance(HOLD + 1)
    with caplog.at_level(logging.WARNING, logger="chronos.cluster.recovery"):
        loop.sweep()
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "suspected_failure"]
    assert record.getMessage() == f"suspected failure of {dead} for message m0"


def test_one_sweep_resets_any_number_of_stuck_rows() -> None:
    clock, store, loop = _setup(count=23, batch=5)
    store.claim(str(uuid.uuid4()), 1000, 100, 10)
    clock.advance(HOLD + 1)
    assert loop.sweep() == 23
    assert store.claimed() == []


def test_fresh_claims_of_live_nodes_are_never_touched() -> None:
    clock, store, loop = _setup(count=2)
    store.claim(str(uuid.uuid4()), 1000, 1, 10)
    clock.advance(HOLD + 1)
    live = str(uuid.uuid4())
    store.claim(live, 1000, 1, 10)
    assert loop.sweep() == 1
    assert [r.readied_by for r in store.claimed()] == [live]


def test_database_errors_do_not_stop_the_detector() -> None:
    clock, store, loop = _setup()
    store.claim(str(uuid.uuid4()), 1000, 10, 10)
    # Well past the hold time: the failed statement counts as a stall of the database (from
    # its send to the next success, a few ms here), which the next sweep waits out.
    clock.advance(HOLD + 1000)
    store.fail_next(1, "find_stuck")
    loop.settings = loop.settings.replace(failure_detection_interval_ms=10)
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        deadline = threading.Event()
        for _ in range(200):
            if not store.claimed():
                break
            deadline.wait(0.01)
    finally:
        loop.stop()
        thread.join(5)
    assert not thread.is_alive()
    assert store.claimed() == []


# -------------------------------------------------------- database errors retried, bugs not
# A bug must stop the node (the orchestrator restarts it, the logs show it), not be counted as a
# database error and retried for ever.


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


def test_while_its_own_writes_fail_the_leader_sweeps_nothing_by_the_hold_time() -> None:
    """Two of three brokers down: every node's writes fail, and a probe row held in flight past
    the hold time would be taken over (a warning per row) only to fail again here, each attempt
    a possible copy. The hold-time sweep waits until this node delivers again."""
    from chronos.observability.dependencies import KAFKA_WRITES

    clock, store, loop = _setup()
    peer = str(uuid.uuid4())
    store.claim(peer, 1000, 10, 10)
    clock.advance(HOLD + 1)
    KAFKA_WRITES.failed("NOT_ENOUGH_REPLICAS")
    try:
        assert loop.run_once() == 0
        assert store.claimed()
    finally:
        KAFKA_WRITES.succeeded()
        KAFKA_WRITES.reset()
    assert loop.run_once() == 1
    assert store.claimed() == []
