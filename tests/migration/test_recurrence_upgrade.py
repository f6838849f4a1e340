"""Rolling upgrade to recurring messages (migration 0007): rows of the previous release (and its
inserts, still running beside the new release) have no rule and no expiry of their own, and are
fired once and deleted by the new release; the migration can be re-run and undone."""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg

from chronos.protocol import ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import PostgresStore, migrate
from tests.migration.helpers import OLD_INSERT


def test_rows_of_the_previous_release_fire_once_beside_a_series(database_url: str) -> None:
    migrate.upgrade(database_url, "0006")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_INSERT, ("before",))
    migrate.upgrade(database_url)
    migrate.upgrade(database_url, "0007")  # re-run: nothing to do, no error
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_INSERT, ("after",))  # an old pod, still running beside the new ones
    store = PostgresStore(database_url)
    try:
        now = store.ping()
        series = ScheduledMessage(
            "series",
            now + timedelta(milliseconds=200),
            None,
            b"v",
            [],
            recurrence=Rule(every_ms=60_000).encode(),
            expires_ms=5_000,
        )
        store.enqueue([series], 0)
        me = str(uuid.uuid4())
        claimed = {r.id: r for r in store.claim(me, 1_000, 10, 10)}
        assert {i: (r.recurrence, r.expires_ms) for i, r in claimed.items()} == {
            "before": (None, None),
            "after": (None, None),
            "series": (series.recurrence, 5_000),
        }
        nexts = [None if i != "series" else series.deadline + timedelta(minutes=1) for i in claimed]
        done = store.delete_fired(me, [(r.id, r.readied_at) for r in claimed.values()], nexts)
        assert done == {"before", "after", "series"}
        with psycopg.connect(database_url) as conn:
            left = conn.execute("SELECT id, deadline, readied_at FROM chronos_messages").fetchall()
        assert left == [("series", series.deadline + timedelta(minutes=1), None)]
    finally:
        store.close()
    migrate.downgrade(database_url, "0006")
    with psycopg.connect(database_url) as conn:
        columns = {
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'chronos_messages'"
            ).fetchall()
        }
    assert not {"recurrence", "expires_ms"} & columns
    migrate.upgrade(database_url)
