"""Rolling upgrade to tenants (migration 0006): the previous release keeps inserting rows that
name no tenant, and rows it wrote before the upgrade have none (NULL). Both are claimed by the
new release, plain and fair; a row of the previous release belongs to the default tenant."""

from __future__ import annotations

import uuid
from datetime import timedelta

import psycopg

from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore, migrate
from tests.migration.helpers import OLD_INSERT


def test_rows_of_the_previous_release_are_claimed_plain_and_fair(database_url: str) -> None:
    migrate.upgrade(database_url, "0005")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_INSERT, ("before",))
    migrate.upgrade(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_INSERT, ("after",))  # an old pod, still running beside the new ones
        rows = conn.execute("SELECT id, tenant FROM chronos_messages").fetchall()
        tenants: dict[str, str | None] = {r[0]: r[1] for r in rows}
        known = [r[0] for r in conn.execute("SELECT tenant FROM chronos_tenants").fetchall()]
    assert tenants == {"before": None, "after": ""}
    assert known == [""]  # the default tenant is known from the start
    store = PostgresStore(database_url)
    try:
        now = store.ping()
        store.enqueue(
            [
                ScheduledMessage(
                    "new", now + timedelta(milliseconds=200), None, b"v", [], tenant="a"
                )
            ],
            0,
        )
        me = str(uuid.uuid4())
        # The flood ("a") holds its share of the budget: the fair claim has no fill, so it takes
        # the default tenant's row and leaves the NULL one to the oldest-first claims.
        excluded = store.claim(me, 1_000, 10, 10, exclude_tenants=["a"])
        assert [(r.id, r.tenant) for r in excluded] == [("after", "")]
        fair = store.claim(me, 1_000, 10, 10, fair=True)  # the fill takes the NULL row
        assert sorted((r.id, r.tenant) for r in fair) == [("before", ""), ("new", "a")]
    finally:
        store.close()
