"""A node reports ready only once its loops are warm: intake has had its first group assignment
(even an empty one), firing's producer knows the output topic's leaders and is connected to them,
and the first claim has run. Liveness does not wait for it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from confluent_kafka import TopicPartition

from chronos.errors import StoreError
from chronos.intake.process import IntakeProcess
from chronos.node import http as chronos_http
from chronos.node.http import Health
from chronos.node.supervisor import Node
from chronos.observability.relay import MergedRegistry
from chronos.testing import FakeConsumer, FakePublisher, InMemoryStore
from tests.unit.helpers import INPUT, OUTPUT, settings


@pytest.fixture(autouse=True)
def broker_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chronos_http, "broker_reachable", lambda _settings: (True, "ok"))
    monkeypatch.setattr(chronos_http, "READY_CACHE_SECONDS", 0.0)


class Parts:
    """A node of in-memory parts whose consumer and firing publisher the test holds."""

    def __init__(self, *, joined: bool, publisher_warm: bool = True) -> None:
        self.consumers: list[FakeConsumer] = []
        self.publishers: dict[str, FakePublisher] = {}
        self.publisher_warm = publisher_warm
        self.node = Node(
            settings(poll_interval_ms=20, http_port=0),
            store=InMemoryStore(),
            publisher_factory=self.publisher,
            consumer_factory=self.consumer(joined),
        )
        self.health = Health(self.node.settings, self.node.state, self.node.store)

    def publisher(self, purpose: str) -> FakePublisher:
        publisher = FakePublisher()
        publisher.warm_ok = self.publisher_warm or purpose != "firing"
        self.publishers[purpose] = publisher
        return publisher

    def consumer(self, joined: bool) -> Callable[..., FakeConsumer]:
        def make(**callbacks: Any) -> FakeConsumer:
            consumer = FakeConsumer(joined=joined, **callbacks)
            self.consumers.append(consumer)
            return consumer

        return make

    def __enter__(self) -> Parts:
        assert self.node.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.node.request_stop()
        self.node.shutdown()


def ready_within(health: Health, seconds: float) -> tuple[bool, dict[str, str]]:
    deadline = time.monotonic() + seconds
    while True:
        ok, checks = health.ready()
        if ok or time.monotonic() > deadline:
            return ok, checks
        time.sleep(0.02)


def test_not_ready_until_intake_has_its_first_assignment() -> None:
    with Parts(joined=False) as parts:
        ok, checks = ready_within(parts.health, 0.5)
        assert not ok
        assert checks["loops"] == "warming: intake"
        assert parts.health.live()[0]  # alive all along: warming is not stuck
        parts.consumers[0].rebalance([TopicPartition(INPUT, 0)])
        ok, checks = ready_within(parts.health, 5)
        assert ok, checks


def test_an_empty_first_assignment_makes_intake_warm() -> None:
    """More nodes than partitions: a node may own none, and is ready all the same."""
    with Parts(joined=False) as parts:
        assert not ready_within(parts.health, 0.3)[0]
        parts.consumers[0].rebalance([])
        ok, checks = ready_within(parts.health, 5)
        assert ok, checks


def test_not_ready_until_the_firing_producer_is_warm() -> None:
    with Parts(joined=True, publisher_warm=False) as parts:
        ok, checks = ready_within(parts.health, 0.5)
        assert not ok
        assert checks["loops"] == "warming: firing"
        assert parts.health.live()[0]
        assert parts.publishers["firing"].warmed[-1] == OUTPUT
        parts.publishers["firing"].warm_ok = True
        ok, checks = ready_within(parts.health, 5)
        assert ok, checks


class ClaimFails(InMemoryStore):
    """The claim statement fails (a statement timeout, say) until ``claims`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.claims = False

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        if not self.claims:
            raise StoreError("canceling statement due to statement timeout", outage=True)
        return super().claim(*args, **kwargs)


def test_firing_is_warm_only_after_its_first_claim() -> None:
    parts = Parts(joined=True)
    store = ClaimFails()
    parts.node = Node(
        parts.node.settings,
        store=store,
        publisher_factory=parts.publisher,
        consumer_factory=parts.consumer(True),
    )
    parts.health = Health(parts.node.settings, parts.node.state, store)
    with parts:
        ok, checks = ready_within(parts.health, 0.5)
        assert not ok
        assert checks["loops"] == "warming: firing"
        store.claims = True
        ok, checks = ready_within(parts.health, 5)
        assert ok, checks


def test_both_warming_are_named() -> None:
    with Parts(joined=False, publisher_warm=False) as parts:
        ok, checks = ready_within(parts.health, 0.5)
        assert not ok
        assert checks["loops"] == "warming: intake, firing"


def test_recovery_has_nothing_to_warm() -> None:
    with Parts(joined=True) as parts:
        assert parts.node.state.loops["recovery"][0].warm.is_set()


def _status(warm: bool | None) -> dict[str, Any]:
    message: dict[str, Any] = {"op": "status", "age": 0.0, "assigned": [], "metrics": []}
    if warm is not None:
        message["warm"] = warm
    return message


def test_the_intake_process_is_warm_when_its_child_says_so() -> None:
    loop = IntakeProcess(settings(), MergedRegistry())
    loop.receive(_status(None))  # a child of an older version says nothing: not warm
    loop.receive(_status(False))
    assert not loop.warm.is_set()
    loop.receive(_status(True))
    assert loop.warm.is_set()
    loop.receive(_status(False))  # a later rebalance does not make it cold again
    assert loop.warm.is_set()


def test_the_childs_status_line_says_whether_its_loop_is_warm() -> None:
    from chronos.intake.child import Link
    from chronos.runtime.loop import Loop

    class Cold(Loop):
        cold_start = True
        assigned: ClassVar[set[tuple[str, int]]] = set()

    loop = Cold()
    link = Link(sock=None, loop=loop)  # type: ignore[arg-type]
    assert json.loads(link.status())["warm"] is False
    loop.warm.set()
    assert json.loads(link.status())["warm"] is True
