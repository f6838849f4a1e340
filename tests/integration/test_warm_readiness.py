"""Readiness on the real broker and Postgres: a node is not ready before its intake has had its
first group assignment, and a node that gets no partition (more nodes than partitions) becomes
ready all the same."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chronos.node import http as chronos_http
from chronos.node.http import Health
from chronos.node.supervisor import Node
from tests.integration.nodes import Nodes
from tests.support import Topics

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chronos_http, "READY_CACHE_SECONDS", 0.0)


class Watch:
    """Polls a starting node's readiness and its intake's assignment, in step."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.seen: list[tuple[bool, dict[str, str], int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        health = Health(self.node.settings, self.node.state, self.node.store)
        while not self._stop.wait(0.02):
            if "intake" not in self.node.state.loops:
                continue
            intake: Any = self.node.state.loops["intake"][0]
            assigned = len(intake.assigned)
            ok, checks = health.ready()
            self.seen.append((ok, checks, assigned))

    def ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.seen and self.seen[-1][0]:
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def started(nodes: Nodes) -> Iterator[Callable[[], tuple[Node, Watch]]]:
    watches: list[Watch] = []

    def start() -> tuple[Node, Watch]:
        node = nodes.start(ready=False)
        watch = Watch(node)
        watches.append(watch)
        return node, watch

    yield start
    for watch in watches:
        watch.stop()


def test_not_ready_before_the_first_assignment(
    started: Callable[[], tuple[Node, Watch]],
) -> None:
    _, watch = started()
    assert watch.ready(60), watch.seen[-1:]
    warming = [checks["loops"] for ok, checks, _ in watch.seen if not ok and "loops" in checks]
    assert any("intake" in w for w in warming), watch.seen[:5]  # it was seen warming first
    assert all(assigned > 0 for ok, _, assigned in watch.seen if ok)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_node_with_no_partition_becomes_ready(
    migrated_database_url: str,
    kafka_bootstrap: str,
    make_topics: Callable[..., Topics],
    protocol: str,
) -> None:
    """Both group protocols (KIP-848's too) hand a member with no partition its empty
    assignment."""
    one = Nodes(migrated_database_url, kafka_bootstrap, make_topics(1))
    # KIP-848: the broker owns the session timeout (the client refuses to be given one).
    group = {"group_protocol": protocol}
    if protocol == "consumer":
        group["consumer_properties"] = {}  # type: ignore[assignment]
    watches: list[Watch] = []
    try:
        for _ in range(2):
            watches.append(Watch(one.start(ready=False, **group)))
            assert watches[-1].ready(60), (len(watches), watches[-1].seen[-1:])
        owned = [len(w.node.state.loops["intake"][0].assigned) for w in watches]  # type: ignore[attr-defined]
        assert sorted(owned) == [0, 1]
    finally:
        for watch in watches:
            watch.stop()
        one.stop_all()
