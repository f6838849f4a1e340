"""The deletes of delivered rows run on a thread of their own: a claim never waits behind one."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any
from unittest.mock import patch

from chronos.errors import StoreError
from chronos.protocol import ScheduledMessage
from tests.unit.helpers import OUTPUT, Firing


def _messages(firing: Firing, prefix: str, due_ms: float, count: int) -> list[ScheduledMessage]:
    deadline = firing.clock.now() + timedelta(milliseconds=due_ms)
    return [
        ScheduledMessage(f"{prefix}{i}", deadline, f"{prefix}{i}".encode(), b"v", [])
        for i in range(count)
    ]


def _run(firing: Firing, ms: int) -> None:
    """The two firing threads' work, without the tests' forced finish (which waits for the
    deletion under way)."""
    for _ in range(ms):
        firing.clock.advance(1)
        firing.loop.step()
        firing.loop.dispatcher.fire_due()
        firing.loop.dispatcher.serve_reports()


def _fired(firing: Firing) -> list[bytes]:
    return [r.key or b"" for r in firing.publisher.records if r.topic == OUTPUT]


def test_a_claim_does_not_wait_behind_a_delete() -> None:
    firing = Firing.create(claim_batch_size=10)
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    delete = firing.store.delete_fired

    def slow_delete(*args: Any, **kwargs: Any) -> set[str]:
        started.set()
        release.wait(3)
        try:
            return delete(*args, **kwargs)
        finally:
            finished.set()

    with patch.object(firing.store, "delete_fired", side_effect=slow_delete):
        firing.store.enqueue(_messages(firing, "a", 100, 10), 0)
        _run(firing, 200)  # fired, delivered, and its delete handed over
        assert started.wait(3)
        firing.store.enqueue(_messages(firing, "b", 200, 10), 0)
        _run(firing, 300)
        fired_while_deleting = not finished.is_set()
        release.set()
        assert fired_while_deleting
        assert sorted(_fired(firing)) == sorted(f"{p}{i}".encode() for p in "ab" for i in range(10))
        firing.loop.finish(force=True)  # waits for the deletion under way, deletes the rest
    assert len(firing.store) == 0
    assert firing.loop.held_bytes == 0 and firing.loop.deleter.rows() == 0


def test_what_is_delivered_during_a_delete_goes_into_the_next_one() -> None:
    firing = Firing.create(claim_batch_size=5)
    release = threading.Event()
    sizes: list[int] = []
    delete = firing.store.delete_fired

    def slow_delete(node_id: str, claims: Any, *args: Any) -> set[str]:
        sizes.append(len(claims))
        release.wait(1 if len(sizes) == 1 else 0)
        return delete(node_id, claims, *args)

    with patch.object(firing.store, "delete_fired", side_effect=slow_delete):
        firing.store.enqueue(_messages(firing, "a", 50, 5), 0)
        _run(firing, 100)  # the first delete under way, held
        for i in range(30):  # due one after the other: delivered one at a time
            firing.store.enqueue(_messages(firing, f"b{i}-", 50 + 5 * i, 1), 0)
        _run(firing, 300)  # delivered meanwhile
        release.set()
        firing.loop.finish(force=True)
    assert sizes == [5, 30]  # one deletion at a time: the rest gathered into the next
    assert len(firing.store) == 0


def test_a_failed_delete_on_the_deleters_thread_is_tried_again() -> None:
    firing = Firing.create(claim_batch_size=10)
    delete = firing.store.delete_fired
    calls: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> set[str]:
        calls.append(1)
        if len(calls) == 1:
            raise StoreError("connection lost", outage=True)
        return delete(*args, **kwargs)

    with patch.object(firing.store, "delete_fired", side_effect=failing_once):
        firing.store.enqueue(_messages(firing, "a", 50, 10), 0)
        _run(firing, 100)
        _run(firing, 1000)  # accounted, retried after the retry delay
        firing.loop.finish(force=True)
    assert len(calls) == 2
    assert len(firing.store) == 0
    assert firing.loop.held_bytes == 0
