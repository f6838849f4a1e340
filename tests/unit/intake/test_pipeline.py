"""Intake keeps one enqueue statement under way while it consumes and parses the next batch;
batches are still stored one at a time, in consumed order, and their offsets stored in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import pytest
from confluent_kafka import Consumer

from chronos.protocol import ScheduledMessage
from chronos.store import Outcome
from chronos.testing import InMemoryStore
from tests.unit.helpers import INPUT
from tests.unit.intake.helpers import Intake, wait_for


class GatedStore(InMemoryStore):
    """Each enqueue statement waits for ``gate``; records what it stored and on which thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.waiting = threading.Event()
        self.batches: list[list[str]] = []
        self.threads: set[str] = set()
        self.fail_with: BaseException | None = None

    def enqueue(
        self,
        messages: Sequence[ScheduledMessage],
        advance_ms: int,
        cancel_ttl_ms: int = 0,
        **flow: Any,
    ) -> list[Outcome]:
        self.threads.add(threading.current_thread().name)
        self.waiting.set()
        self.gate.wait(10)
        self.waiting.clear()
        if self.fail_with is not None:
            raise self.fail_with
        self.batches.append([m.id for m in messages])
        return super().enqueue(messages, advance_ms, cancel_ttl_ms, **flow)


def gated_intake(**overrides: Any) -> tuple[Intake, GatedStore]:
    t = Intake(consume_batch_size=1, **overrides)
    store = GatedStore(t.clock)
    t.store = store
    t.loop.store = store
    return t, store


def test_the_next_batch_is_consumed_while_a_statement_is_under_way() -> None:
    t, store = gated_intake()
    records = [t.record(f"m{i}", 60_000) for i in range(3)]
    t.consumer.feed(records)
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    try:
        assert store.waiting.wait(5), "no statement started"
        # The first batch's statement waits; the second batch is consumed (and parsed) meanwhile,
        # but its statement does not start before the first one ends.
        assert wait_for(lambda: len(t.consumer._queue) == 1)
        assert store.batches == []
        store.gate.set()
        assert wait_for(lambda: t.consumer.stored == {(INPUT, 0): 4})
    finally:
        store.gate.set()
        t.loop.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert store.batches == [["m0"], ["m1"], ["m2"]]  # one at a time, in consumed order
    assert store.threads == {"chronos-enqueue_0"}  # the statements' own thread
    assert t.consumer.committed == {(INPUT, 0): 4}


def test_a_statement_that_crashes_stops_the_loop_with_its_error() -> None:
    t, store = gated_intake()
    store.fail_with = RuntimeError("a bug in the statement's thread")
    store.gate.set()
    t.consumer.feed([t.record("m", 60_000)])
    with pytest.raises(RuntimeError, match="a bug in the statement's thread"):
        t.loop.run()
    assert t.consumer.stored == {} and t.consumer.closed


def test_a_revoke_waits_for_the_statement_under_way_and_stores_its_offsets() -> None:
    t, store = gated_intake()
    consumer = cast(Consumer, t.consumer)
    prepared = t.loop.prepare([t.record("m", 60_000)])
    assert prepared is not None
    t.loop.start(consumer, prepared)
    assert store.waiting.wait(5)
    threading.Timer(0.1, store.gate.set).start()
    t.loop._on_revoke(consumer, [])  # returns once the batch is stored and its offset too
    assert store.batches == [["m"]]
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_stopping_while_a_statement_is_under_way_stores_that_batch_first() -> None:
    t, store = gated_intake()
    t.consumer.feed([t.record("m", 60_000)])
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    assert store.waiting.wait(5)
    t.loop.stop()
    time.sleep(0.05)
    assert thread.is_alive()  # waiting for the statement
    store.gate.set()
    thread.join(10)
    assert not thread.is_alive()
    assert store.batches == [["m"]]
    assert t.consumer.committed == {(INPUT, 0): 2}
