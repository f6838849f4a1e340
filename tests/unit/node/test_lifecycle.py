"""A whole node on the fakes: its loops share the store, a stop drains it, a dying loop stops it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chronos.node.supervisor import Node
from chronos.testing import FakeConsumer, FakePublisher, InMemoryStore, make_record
from tests.support.kafka import chronos_headers
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT, settings


def _eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


class Rig:
    def __init__(self, **overrides: Any) -> None:
        self.store = InMemoryStore()
        self.publishers: dict[str, FakePublisher] = {}
        self.consumer = FakeConsumer()
        self.node = Node(
            settings(poll_interval_ms=20, **overrides),
            store=self.store,
            publisher_factory=self._publisher,
            consumer_factory=lambda **_: self.consumer,
        )
        self.offset = 0

    def _publisher(self, purpose: str) -> FakePublisher:
        return self.publishers.setdefault(purpose, FakePublisher())

    def delivered(self, topic: str) -> list[Any]:
        return [r for p in self.publishers.values() for r in p.delivered(topic)]

    def send(self, message_id: str | None, in_ms: float, value: bytes = b"v") -> None:
        deadline = datetime.now(UTC) + timedelta(milliseconds=in_ms)
        headers = chronos_headers(message_id, deadline) if message_id else [("x", b"y")]
        self.offset += 1
        self.consumer.feed([make_record(INPUT, 0, self.offset, b"k", value, headers)])


def test_node_schedules_fires_and_drains_on_stop() -> None:
    rig = Rig(lookahead_ms=1000)
    rig.node.start()
    exit_code: list[int] = []
    try:
        rig.send("due", 200, b"due")
        rig.send("late", -1000, b"late")
        rig.send(None, 0)  # malformed
        assert _eventually(lambda: len(rig.delivered(OUTPUT)) == 2)
        assert len(rig.delivered(DEAD_LETTER)) == 1
        assert _eventually(lambda: len(rig.store) == 0)  # deleted once confirmed
        rig.send("claimed-at-stop", 900)  # claimed within the lookahead, not yet fired
        rig.send("waiting-at-stop", 60_000)
        assert _eventually(lambda: len(rig.store.claimed()) == 1)
    finally:
        waiter = threading.Thread(target=lambda: exit_code.append(rig.node.wait()))
        waiter.start()
        rig.node.request_stop()
        waiter.join(15)
    assert exit_code == [0]
    assert rig.store.claimed() == []  # graceful shutdown leaves no claimed rows
    assert sorted(rig.store.rows()) == ["claimed-at-stop", "waiting-at-stop"]
    assert rig.consumer.committed == {(INPUT, 0): rig.offset + 1}
    assert [r.value for r in rig.delivered(OUTPUT)] == [b"late", b"due"]


class BrokenConsumer(FakeConsumer):
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        raise RuntimeError("the consumer is broken")


def test_node_stops_with_status_1_when_a_loop_dies() -> None:
    rig = Rig()
    rig.consumer = BrokenConsumer()
    rig.node.start()
    exit_code: list[int] = []
    waiter = threading.Thread(target=lambda: exit_code.append(rig.node.wait()))
    waiter.start()
    waiter.join(15)
    assert exit_code == [1]
    assert not rig.node.state.loops_alive()


def test_a_started_node_may_fire_at_once_and_leads_alone(caplog: pytest.LogCaptureFixture) -> None:
    """Registering is the node's first heartbeat: its lease starts there (no lapse at start)."""
    rig = Rig()
    with caplog.at_level(logging.INFO, logger="chronos"):
        rig.node.start()
        try:
            assert rig.node.leadership.may_fire()
            assert _eventually(rig.node.leadership.is_leader)
        finally:
            rig.node.request_stop()
            assert rig.node.wait() == 0
    events = [getattr(r, "event", None) for r in caplog.records]
    assert "lease_lapsed" not in events
    assert "leader_elected" in events
