"""The leader's vacuum against Postgres (``chronos.cluster.vacuum``): the store counts the
messages table's dead row versions, the vacuum removes them, and a role that may not vacuum is
told apart (tests/integration/test_least_privilege.py: the nodes' role with its grants)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from chronos.cluster.vacuum import MIN_DEAD_ROWS, Vacuum
from chronos.store import PostgresStore

pytestmark = pytest.mark.integration

ROWS = 3 * MIN_DEAD_ROWS


@pytest.fixture
def database(database_factory: Any) -> Iterator[str]:
    """A migrated database whose messages table autovacuum leaves alone."""
    url = database_factory.create_migrated()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE chronos_messages SET (autovacuum_enabled = false)")
    yield url
    database_factory.drop(url)


def leave_dead_rows(url: str, rows: int) -> None:
    """Insert and delete ``rows`` messages, and wait for the statistics to count them dead."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_value)"
            " SELECT 'dead-' || g, now() + interval '1 hour', 'x'::bytea"
            " FROM generate_series(1, %s) g",
            (rows,),
        )
        conn.execute("DELETE FROM chronos_messages WHERE id LIKE 'dead-%%'")
        conn.execute("SELECT pg_stat_force_next_flush()")


def dead_soon(store: PostgresStore, at_least: int) -> int:
    dead = 0
    for _ in range(100):
        dead, _ = store.dead_messages()
        if dead >= at_least:
            break
        time.sleep(0.1)
    return dead


def test_the_vacuum_removes_the_dead_rows_the_statistics_count(database: str) -> None:
    url, store = database, PostgresStore(database)
    assert store.dead_messages() == (0, True)  # the owner may vacuum
    leave_dead_rows(url, ROWS)
    assert dead_soon(store, ROWS) >= ROWS
    vacuum = Vacuum(store, 5000, lambda: True)
    assert vacuum.tick() is True
    with psycopg.connect(url, autocommit=True) as conn:
        (vacuums,) = conn.execute(
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'chronos_messages'"
        ).fetchone() or (0,)
    assert vacuums == 1
    assert store.dead_messages()[0] < MIN_DEAD_ROWS
    assert vacuum.tick() is False  # nothing left to vacuum
    store.close()


def test_the_vacuum_runs_without_the_sessions_statement_timeout(database: str) -> None:
    """A node's sessions run with a statement timeout (four fifths of the hold time); the
    vacuum's time follows the table's size, so its connection runs without one."""
    store = PostgresStore(database, statement_timeout_ms=20)
    try:
        leave_dead_rows(database, 100 * ROWS)
        started = time.monotonic()
        store.vacuum_messages()
        assert time.monotonic() - started > 0.02  # longer than the sessions' timeout
        assert dead_soon(store, 0) < MIN_DEAD_ROWS
    finally:
        store.close()
