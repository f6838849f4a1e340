"""Batch writes under concurrency, slow statements and the session time zone, on real Postgres
(deadlocks, a claim racing a reschedule, a fired occurrence's delete racing a cancel of any
kind, a long statement made visible, a deadline in year 9999)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg import sql

from chronos.protocol import Action, ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import MessageFilter, Outcome, PostgresStore, StuckRow
from chronos.store.batch import encode_batch
from chronos.store.postgres.sql import query
from tests.support.store_contract import msg

pytestmark = pytest.mark.integration


@pytest.fixture
def store(migrated_database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(migrated_database_url)
    yield store
    store.close()


def _sample(name: str, statement: str) -> float:
    return REGISTRY.get_sample_value(name, {"statement": statement}) or 0.0


def _claim_all(store: PostgresStore, node_id: str, count: int) -> list[tuple[str, datetime]]:
    rows = store.claim(node_id, 1_000, count, 10)
    assert len(rows) == count
    return [(r.id, r.readied_at) for r in rows]


def test_delete_and_reset_in_opposite_orders_never_deadlock(
    migrated_database_url: str, store: PostgresStore
) -> None:
    """One session deletes fired rows while another resets the same rows as stuck, each given
    the ids in the opposite order: rows are locked in id order, so no deadlock, ever."""
    other = PostgresStore(migrated_database_url)
    failures: list[BaseException] = []
    before = _sample("chronos_deadlock_retries_total", "delete_fired") + _sample(
        "chronos_deadlock_retries_total", "reset_stuck"
    )
    try:
        for iteration in range(30):
            node_id = str(uuid.uuid4())
            due = store.ping() + timedelta(milliseconds=200)
            store.enqueue([msg(f"d{iteration}-{i:03d}", due) for i in range(200)], 0)
            claims = sorted(_claim_all(store, node_id, 200))
            stuck = [StuckRow(i, node_id, at) for i, at in reversed(claims)]
            barrier = threading.Barrier(2)

            def delete(
                claims: list[tuple[str, datetime]] = claims,
                node_id: str = node_id,
                barrier: threading.Barrier = barrier,
            ) -> None:
                barrier.wait()
                try:
                    store.delete_fired(node_id, claims)
                except BaseException as exc:  # noqa: BLE001 - asserted on by the test
                    failures.append(exc)

            def reset(stuck: list[StuckRow] = stuck, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                try:
                    other.reset_stuck(stuck)
                except BaseException as exc:  # noqa: BLE001 - asserted on by the test
                    failures.append(exc)

            threads = [threading.Thread(target=delete), threading.Thread(target=reset)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        assert failures == []
        after = _sample("chronos_deadlock_retries_total", "delete_fired") + _sample(
            "chronos_deadlock_retries_total", "reset_stuck"
        )
        assert after == before  # not even a retried deadlock: the lock order rules them out
    finally:
        other.close()


def test_a_deadlock_victim_is_retried_not_dropped(
    migrated_database_url: str, store: PostgresStore
) -> None:
    """A foreign transaction locks the rows in the other order: Postgres aborts the store's
    delete to break the deadlock, and the store runs it again instead of dropping the batch."""
    node_id = str(uuid.uuid4())
    store.enqueue(
        [
            msg("a", store.ping() + timedelta(milliseconds=200)),
            msg("b", store.ping() + timedelta(milliseconds=200)),
        ],
        0,
    )
    claims = _claim_all(store, node_id, 2)
    before = _sample("chronos_deadlock_retries_total", "delete_fired")
    result: list[object] = []
    with psycopg.connect(migrated_database_url) as foreign:
        foreign.execute("SET deadlock_timeout = '30s'")  # the store's session detects it
        foreign.execute("SELECT 1 FROM chronos_messages WHERE id = 'b' FOR UPDATE")

        def delete() -> None:
            try:
                result.append(store.delete_fired(node_id, claims))
            except BaseException as exc:  # noqa: BLE001 - asserted on by the test
                result.append(exc)

        thread = threading.Thread(target=delete)
        thread.start()
        time.sleep(0.3)  # the delete holds 'a' and waits for 'b'
        foreign.execute("SELECT 1 FROM chronos_messages WHERE id = 'a' FOR UPDATE")
        foreign.rollback()
        thread.join(30)
    assert result == [{"a", "b"}]
    assert _sample("chronos_deadlock_retries_total", "delete_fired") == before + 1


@pytest.mark.parametrize("statement", ["claim_due", "claim_due_fair"])
def test_a_claim_that_began_before_a_reschedule_committed_does_not_see_its_row_replaced(
    migrated_database_url: str, store: PostgresStore, statement: str
) -> None:
    """A claim's statement starts, a reschedule of the waiting series commits, then the claim
    reaches the row (READ COMMITTED follows the update: it claims the replacement). The claim
    is after the reschedule: the occurrence it fires is the replacement's, and its delete
    advances the series instead of giving the row back to fire again. The claim's transaction
    is opened before the reschedule to put the two in that order every time."""
    every = Rule(every_ms=1_000).encode()
    at = store.ping() + timedelta(milliseconds=300)
    store.enqueue([ScheduledMessage("s", at, b"k", b"v1", [], recurrence=every)], 0)
    node_id = str(uuid.uuid4())
    params: dict[str, object] = {
        "node_id": node_id,
        "horizon_ms": 1_000,
        "limit": 10,
        "park_attempts": 10,
        "max_bytes": 1 << 40,
        "first_always": True,
        "cursor": "",
        "tenants": 10,
        "exclude_tenants": [],
        "fill": True,
        "paused_tenants": [],
        "paused_topics": [],
        "max_lateness_ms": None,
        "catchup_after_ms": None,
        "catchup_limit": 0,
    }
    soon = at + timedelta(milliseconds=100)
    replacement = ScheduledMessage("s", soon, b"k", b"v2", [], Action.RESCHEDULE, recurrence=every)
    with psycopg.connect(migrated_database_url) as claimer:
        claimer.execute("SELECT now()")  # the claim's transaction (and its now()) has begun
        assert store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]  # committed
        rows = claimer.execute(query(statement), params).fetchall()
        claimer.commit()
    ((message_id, _, readied_at, _, value, *_),) = [r for r in rows if r[0] is not None]
    assert (message_id, value) == ("s", b"v2")
    following = soon + timedelta(seconds=1)
    assert store.delete_fired(node_id, [("s", readied_at)], [following]) == {"s"}
    stored = store.get_message("s")
    assert stored is not None
    assert (stored.deadline, stored.readied_at) == (following, None)


def _advance_waits_for_a_lock(conn: psycopg.Connection[Any]) -> bool:
    """advance_fired (known by its comment, sent with it) waits for a row lock."""
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        ("%Phase 2 of a batch holding occurrences of series%",),
    ).fetchone()
    return bool(row and row[0])


def _cancel_statement(via: str) -> tuple[str, dict[str, Any], Callable[[Any], bool]]:
    """The statement of a cancel of the claimed id "s" (a Kafka cancel, the admin API's, or a
    bulk cancel by filter), its parameters, and a check of its answer: "claimed"."""
    ttl = 60_000
    if via == "kafka":
        cancel = ScheduledMessage("s", datetime.now(UTC), None, None, [], Action.CANCEL)
        params = encode_batch([cancel]) | {
            "advance_ms": 0,
            "cancel_ttl_ms": ttl,
            "new_tenants": [],
            "fenced": False,
            "output_topic": "",
            "catchup_after_ms": None,
            "history": True,
        }
        return "enqueue_batch", params, lambda rows: rows == [(1, "cancel_claimed")]
    if via == "admin":
        params = {"id": "s", "cancel_ttl_ms": ttl, "by": "admin", "history": True}
        return "cancel_message", params, lambda rows: rows == [(True, False)]
    params = MessageFilter(id_prefix="s").params() | {
        "after_deadline": None,
        "after_id": None,
        "park_attempts": 10,
        "cancel_ttl_ms": ttl,
        "batch": 1_000,
        "by": "admin",
        "history": True,
    }
    return "bulk_cancel", params, lambda rows: rows[0][:3] == (0, 1, 1)  # done, claimed, picked


@pytest.mark.parametrize("via", ["kafka", "admin", "bulk"])
@pytest.mark.parametrize("rule", ["series", "one-shot"])
def test_a_cancel_committed_while_the_fired_occurrence_waits_for_its_row_wins(
    migrated_database_url: str, store: PostgresStore, rule: str, via: str
) -> None:
    """A series replaced while its occurrence is claimed, then cancelled (by a Kafka cancel, the
    admin API's or a bulk cancel): the cancel's statement holds the row when the fired
    occurrence's delete reaches it, and commits while the delete waits. The delete's view of
    the cancel markers predates the cancel (a statement's snapshot): the cancel must show on
    the row itself, or the replacement is given back and fires."""
    every = Rule(every_ms=1_000).encode()
    at = store.ping() + timedelta(milliseconds=300)
    store.enqueue([ScheduledMessage("s", at, b"k", b"v1", [], recurrence=every)], 0)
    node_id = str(uuid.uuid4())
    (row,) = store.claim(node_id, 1_000, 10, 10)
    replacement = ScheduledMessage(
        "s", at, b"k", b"v2", [], Action.RESCHEDULE, recurrence=every if rule == "series" else None
    )
    assert store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
    statement, params, claimed = _cancel_statement(via)
    done: list[object] = []
    with (
        psycopg.connect(migrated_database_url) as canceller,
        psycopg.connect(migrated_database_url, autocommit=True) as watcher,
    ):
        answer = canceller.execute(query(statement), params).fetchall()
        assert claimed(answer), answer  # not committed yet: the row stays locked

        def delete() -> None:
            try:
                done.append(store.delete_fired(node_id, [("s", row.readied_at)], [None]))
            except BaseException as exc:  # noqa: BLE001 - asserted on by the test
                done.append(exc)

        thread = threading.Thread(target=delete)
        thread.start()
        deadline = time.monotonic() + 10
        while not _advance_waits_for_a_lock(watcher) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _advance_waits_for_a_lock(watcher), "the delete never waited for the row"
        canceller.commit()
        thread.join(30)
    assert done == [{"s"}]
    assert store.get_message("s") is None  # deleted: the replacement never fires
    assert store.claim(node_id, 1_000, 10, 10) == []


def test_a_slow_statement_is_counted_logged_and_visible_while_it_runs(
    migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(migrated_database_url, slow_statement_s=0.3)
    try:
        store.enqueue([msg("slow", store.ping() + timedelta(minutes=5))], 0)
        before = _sample("chronos_slow_statements_total", "cancel_message")
        ages: list[float] = []
        with psycopg.connect(migrated_database_url) as locker:
            locker.execute("SELECT 1 FROM chronos_messages WHERE id = 'slow' FOR UPDATE")
            thread = threading.Thread(target=store.cancel_message, args=("slow",))
            with caplog.at_level(logging.WARNING, logger="chronos.store"):
                thread.start()
                time.sleep(0.6)
                ages.append(store.longest_running_s())
                locker.rollback()
                thread.join(10)
        assert ages[0] >= 0.5
        assert store.longest_running_s() == 0.0
        assert _sample("chronos_slow_statements_total", "cancel_message") == before + 1
        (record,) = [r for r in caplog.records if getattr(r, "event", "") == "slow_statement"]
        assert record.statement == "cancel_message"  # type: ignore[attr-defined]
        assert "cancel_message" in record.getMessage()
        assert record.seconds >= 0.5  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_deadline_in_year_9999_east_of_utc_does_not_break_the_backlog(
    migrated_database_url: str,
) -> None:
    """With the database's time zone east of UTC, 9999-12-31T23:00Z is 10000-01-01 local:
    every node session speaks UTC, so the backlog (and the admin reads) still work."""
    name = psycopg.conninfo.conninfo_to_dict(migrated_database_url)["dbname"]
    with psycopg.connect(migrated_database_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET timezone = 'Asia/Tokyo'").format(
                sql.Identifier(str(name))
            )
        )
    store = PostgresStore(migrated_database_url)
    try:
        far = datetime(9999, 12, 31, 23, 0, tzinfo=UTC)
        store.enqueue([msg("far", far)], 0)
        backlog = store.backlog(10)
        assert backlog.newest_deadline == far
        stored = store.get_message("far")
        assert stored is not None and stored.deadline == far
        (listed,) = store.list_messages(state=None, park_attempts=10, limit=10)
        assert listed.deadline == far
    finally:
        store.close()
