"""A claim whose result arrives late does not make its rows late: their timers start from the
clocks' offset that the node's quick claims measured, not from this result's arrival
(chronos.store.postgres.clock). On real Postgres; the result is held up in the client (as a slow
commit, a long trip back or a busy process would hold it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from chronos.protocol import ScheduledMessage
from chronos.store import ClaimedRow, PostgresStore

pytestmark = pytest.mark.integration

HELD_S = 0.3


@pytest.fixture
def store(migrated_database_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(migrated_database_url)
    yield store
    store.close()


def _due_here(store: PostgresStore, row: ClaimedRow) -> float:
    """The row's deadline on this process's monotonic clock, by a ping (at its midpoint)."""
    before = time.monotonic()
    now = store.ping()
    after = time.monotonic()
    return (before + after) / 2 + row.deadline - now.timestamp()


def _claim_one(store: PostgresStore, node: str, message_id: str, due_in_s: float) -> ClaimedRow:
    due = store.ping() + timedelta(seconds=due_in_s)
    store.enqueue([ScheduledMessage(message_id, due, None, b"x", [])], 0)
    [row] = store.claim(node, 10_000, 100, 10)
    return row


def test_a_claim_result_held_up_does_not_make_its_rows_late(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = str(uuid.uuid4())
    for i in range(3):  # quick claims: the clocks' offset, to a few milliseconds
        quick = _claim_one(store, node, f"quick-{i}", 5)
        assert (
            abs(quick.claimed_monotonic + quick.remaining_ms / 1000 - _due_here(store, quick))
            < 0.05
        )

    real_fetchall = psycopg.Cursor.fetchall

    def held_up(self: psycopg.Cursor) -> list:  # type: ignore[type-arg]
        rows = real_fetchall(self)
        time.sleep(HELD_S)
        return rows

    monkeypatch.setattr(psycopg.Cursor, "fetchall", held_up)
    asked = time.monotonic()
    slow = _claim_one(store, node, "slow", 5)
    assert slow.claimed_monotonic - asked >= HELD_S  # its result did arrive held up
    monkeypatch.undo()

    timer = slow.claimed_monotonic + slow.remaining_ms / 1000
    error = timer - _due_here(store, slow)
    # Anchored at the arrival, the timer would run HELD_S late; anchored by the quick claims it
    # is within their own few milliseconds, and never early by more than a ping's half trip.
    assert -0.01 < error < 0.05, f"the timer is {error * 1000:.0f} ms off its deadline"
