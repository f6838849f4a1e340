"""A node whose dependency is away waits for it: alive (not ready) meanwhile, never exiting;
a loop that waits between retries is not stuck."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from chronos.errors import ConfigError, StoreError
from chronos.node.http import Health
from chronos.node.supervisor import Node
from chronos.runtime.loop import Loop
from chronos.store.postgres.session import (
    DATABASE_ACCESS_REFUSED,
    DATABASE_MISSING,
    DATABASE_TLS_FAILED,
    DATABASE_TLS_REQUIRED,
    DATABASE_URL_INVALID,
    connection_refusal,
    unreachable,
)
from chronos.testing import FakeConsumer, FakePublisher, InMemoryStore
from tests.unit.helpers import settings


class AwayStore(InMemoryStore):
    """Postgres away for the first ``failures`` registrations."""

    def __init__(self, failures: int, outage: bool = True) -> None:
        super().__init__()
        self.failures = failures
        self.outage = outage
        self.attempts = 0

    def register_node(self, *args: Any, **kwargs: Any) -> Any:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise StoreError("cannot connect to Postgres: refused", outage=self.outage)
        return super().register_node(*args, **kwargs)


def make_node(store: InMemoryStore) -> Node:
    return Node(
        settings(poll_interval_ms=20, http_port=0),
        store=store,
        publisher_factory=lambda _: FakePublisher(),
        consumer_factory=lambda **_: FakeConsumer(),
    )


def test_start_up_waits_for_postgres_and_stays_alive_meanwhile() -> None:
    store = AwayStore(failures=3)
    node = make_node(store)
    health = Health(node.settings, node.state, store)
    seen: list[tuple[bool, dict[str, str]]] = []
    started: list[bool] = []
    thread = threading.Thread(target=lambda: started.append(node.start()))
    thread.start()
    while thread.is_alive():
        if node.state.waiting_for:
            seen.append(health.live())
        time.sleep(0.01)
    try:
        assert started == [True]
        assert store.attempts == 4
        assert seen and all(ok for ok, _ in seen), seen
        assert "waiting for Postgres" in seen[0][1]["loops"]
        assert node.state.waiting_for == ""
        assert health.live()[0]
    finally:
        node.request_stop()
        node.shutdown()


def test_a_stop_while_waiting_ends_start_up() -> None:
    node = make_node(AwayStore(failures=10**6))
    threading.Timer(0.3, node.request_stop).start()
    assert node.start() is False


def test_an_error_that_is_not_an_outage_still_stops_start_up_naming_the_setting() -> None:
    node = make_node(AwayStore(failures=1, outage=False))
    with pytest.raises(ConfigError, match="CHRONOS_DATABASE_URL"):
        node.start()


def test_a_loop_waiting_between_retries_makes_progress() -> None:
    loop = Loop()
    loop.alive_at = time.monotonic() - 100  # as if stuck for 100 s
    loop.wait(0.01)
    assert time.monotonic() - loop.progress_at() < 1


@pytest.mark.parametrize(
    ("message", "away"),
    [
        (
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
            "Connection refused",
            True,
        ),
        ("connection failed: timeout expired", True),
        ("connection failed: FATAL:  the database system is starting up", True),
        ('connection failed: could not translate host name "pg" to address', True),
        ('connection failed: FATAL:  password authentication failed for user "x"', False),
        ('connection failed: FATAL:  database "nope" does not exist', False),
        ("connection failed: no pg_hba.conf entry for host", False),
    ],
)
def test_a_failed_connection_is_an_outage_unless_a_setting_is_wrong(
    message: str, away: bool
) -> None:
    assert unreachable(psycopg.OperationalError(message)) is away


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ('FATAL:  password authentication failed for user "x"', DATABASE_ACCESS_REFUSED),
        ('FATAL:  no pg_hba.conf entry for host "h", SSL encryption', DATABASE_ACCESS_REFUSED),
        ('FATAL:  no pg_hba.conf entry for host "h", no encryption', DATABASE_TLS_REQUIRED),
        ('FATAL:  database "nope" does not exist', DATABASE_MISSING),
        ("SSL error: certificate verify failed", DATABASE_TLS_FAILED),
        ('server certificate for "a" does not match host name "b"', DATABASE_TLS_FAILED),
        ('invalid sslmode value: "sure"', DATABASE_URL_INVALID),
    ],
)  # fmt: skip
def test_a_refused_connection_is_named_in_chronos_s_words(message: str, reason: str) -> None:
    assert connection_refusal(psycopg.OperationalError(f"connection failed: {message}")) == reason


def test_start_up_waits_for_a_topic_this_node_may_not_use_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A missing ACL (or topic) at start-up is waited for like an outage, the topic named."""
    from chronos import kafka
    from chronos.errors import TopicMissingError

    refusals = [TopicMissingError("topic 'out' (CHRONOS_OUTPUT_TOPIC): this node may not WRITE it")]

    def check_topics(_settings: Any) -> None:
        if refusals:
            raise refusals.pop()

    monkeypatch.setattr(kafka, "check_topics", check_topics)
    store = InMemoryStore()
    node = make_node(store)
    health = Health(node.settings, node.state, store)
    waiting: list[str] = []
    thread = threading.Thread(target=lambda: node.start(check_broker=True))
    thread.start()
    while thread.is_alive():
        if node.state.waiting_for:
            waiting.append(health.live()[1]["loops"])
        time.sleep(0.01)
    try:
        assert waiting and "CHRONOS_OUTPUT_TOPIC" in waiting[0] and "WRITE" in waiting[0]
        assert node.state.waiting_for == "" and not refusals
    finally:
        node.request_stop()
        node.shutdown()


def test_readiness_says_writes_fail_while_the_broker_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chronos.node import http as chronos_http
    from chronos.observability.dependencies import KAFKA_WRITES

    monkeypatch.setattr(chronos_http, "broker_reachable", lambda _settings: (True, "ok"))
    node = make_node(InMemoryStore())
    node.state.loops = {}
    KAFKA_WRITES.reset()
    KAFKA_WRITES.failed("NOT_ENOUGH_REPLICAS")
    try:
        ok, checks = Health(node.settings, node.state, node.store).ready()
    finally:
        KAFKA_WRITES.reset()
    assert not ok
    assert checks["kafka"] == "writes failing"
