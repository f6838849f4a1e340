"""Runtime limits on the real Postgres (and broker): the byte budget of claims, statement and
TCP timeouts, and a liveness probe that notices a loop stuck on a black-holed connection."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from chronos.embedded import free_port
from chronos.errors import StoreError
from chronos.firing.loop import FiringLoop
from chronos.node.supervisor import Node
from chronos.protocol import ScheduledMessage
from chronos.store import Outcome, PostgresStore
from chronos.store.postgres.session import STATEMENT_CANCELLED
from chronos.testing import FakePublisher, unfenced
from tests.support import Topics, make_settings
from tests.support.polling import eventually
from tests.support.proxy import BlackHoleProxy

pytestmark = pytest.mark.integration

MB = 1024 * 1024


def claimed_bytes(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(octet_length(message_value)), 0) FROM chronos_messages"
            " WHERE readied_at IS NOT NULL"
        ).fetchone()
    return int(row[0]) if row else 0


def test_one_megabyte_values_never_make_a_node_hold_more_than_its_byte_budget(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    budget = 5 * MB + MB // 2  # five 1 MB messages fit
    settings = make_settings(
        migrated_database_url,
        kafka_bootstrap,
        topics,
        max_in_flight_bytes=budget,
        lookahead_ms=20000,  # every row is claimable at once: only the budget holds claims back
        delivery_timeout_ms=3000,  # with lookahead and poll below the hold time
        hold_time_ms=30000,
    )
    store = PostgresStore(migrated_database_url)
    publisher = FakePublisher(auto=False)  # deliveries held back: only the budget limits claims
    loop = FiringLoop(settings, store, publisher, unfenced(settings.node_id))
    deadline = datetime.now(UTC) + timedelta(seconds=5)
    outcomes = store.enqueue(
        [ScheduledMessage(f"m{i}", deadline, None, bytes([i]) * MB, []) for i in range(30)], 0
    )
    assert outcomes == [Outcome.INSERTED] * 30
    try:
        peak = 0
        limit = time.monotonic() + 2
        while time.monotonic() < limit:
            loop.step()
            loop.dispatcher.fire_due()
            peak = max(peak, claimed_bytes(migrated_database_url))
            time.sleep(0.02)
        assert 0 < peak <= budget
        fired: set[int] = set()
        limit = time.monotonic() + 30
        while len(fired) < 30 and time.monotonic() < limit:
            publisher.deliver()
            publisher.poll(0)
            loop.step()
            loop.finish(force=True)
            loop.dispatcher.fire_due()
            fired |= {(r.value or b"\xff")[0] for r in publisher.delivered()}
            peak = max(peak, claimed_bytes(migrated_database_url))
        assert fired == set(range(30))
        assert peak <= budget
    finally:
        store.close()


def test_a_statement_blocked_by_a_lock_times_out_and_the_store_recovers(
    migrated_database_url: str,
) -> None:
    store = PostgresStore(migrated_database_url, statement_timeout_ms=500)
    node = "00000000-0000-0000-0000-000000000001"
    store.ping()
    outcome: list[BaseException | int] = []

    def claim() -> None:
        try:
            outcome.append(len(store.claim(node, 1000, 10, 10)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    with psycopg.connect(migrated_database_url) as locker:
        locker.execute("LOCK TABLE chronos_messages IN ACCESS EXCLUSIVE MODE")
        thread = threading.Thread(target=claim, daemon=True)
        started = time.monotonic()
        thread.start()
        thread.join(5)
        assert not thread.is_alive(), "the claim waited on the lock past its statement timeout"
        assert time.monotonic() - started < 3
        (error,) = outcome
        assert isinstance(error, StoreError) and error.outage, error
        assert STATEMENT_CANCELLED in str(error), error
    assert store.claim(node, 1000, 10, 10) == []  # the lock is gone: the store works again
    store.close()


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def _live(port: int) -> tuple[int, dict[str, Any]]:
    return _probe(port, "live")


def _probe(port: int, which: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/{which}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_liveness_fails_while_postgres_is_black_holed_and_recovers(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    target = urlsplit(migrated_database_url)
    with BlackHoleProxy((target.hostname or "127.0.0.1", target.port or 5432)) as proxy:
        settings = make_settings(
            _via(migrated_database_url, proxy.port),
            kafka_bootstrap,
            topics,
            hold_time_ms=1500,
            lookahead_ms=200,
            delivery_timeout_ms=1000,
            poll_interval_ms=50,
            liveness_timeout_ms=7000,
            database_tcp_timeout_ms=0,  # the proxy's kernel answers TCP: only liveness can tell
            http_host="127.0.0.1",
            http_port=free_port(),
        )
        node = Node(settings)
        node.start()
        port = node.http.server_address[1]
        try:
            # Every loop has its connection (through the proxy) once the node is ready and a
            # few claim and sweep intervals have passed; then the network goes silent.
            assert eventually(lambda: _probe(port, "ready")[0] == 200, 15)
            time.sleep(1)
            assert _live(port)[0] == 200
            proxy.pause()
            assert eventually(lambda: _live(port)[0] == 503, 15), "liveness stayed green"

            def firing_stalled() -> bool:
                # Which loop is seen stalled first is a race (the leader's sweep often is); the
                # firing loop, blocked in a statement on the silent connection, must follow.
                status, body = _live(port)
                return status == 503 and "firing" in body["loops"]

            assert eventually(firing_stalled, 15), _live(port)
            proxy.resume()
            assert eventually(lambda: _live(port)[0] == 200, 15), "the node did not recover"
        finally:
            proxy.resume()
            node.request_stop()
            node.shutdown()


def test_a_node_sessions_carry_the_configured_timeouts_and_commit_level(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    settings = make_settings(
        migrated_database_url,
        kafka_bootstrap,
        topics,
        statement_timeout_ms=1234,
        database_synchronous_commit="remote_apply",
        database_tcp_timeout_ms=9000,
    )
    node = Node(settings)
    try:
        with node.store._conn().cursor() as cur:  # type: ignore[attr-defined]
            cur.execute("SHOW statement_timeout")
            assert cur.fetchone() == {"statement_timeout": "1234ms"}
            cur.execute("SHOW synchronous_commit")
            assert cur.fetchone() == {"synchronous_commit": "remote_apply"}
        info = node.store._conn().info  # type: ignore[attr-defined]
        assert info.get_parameters()["tcp_user_timeout"] == "9000"
        assert info.get_parameters()["keepalives"] == "1"
    finally:
        node.store.close()
