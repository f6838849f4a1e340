"""Migration 0016 (the history's key index narrowed to the key's first 64 bytes) on a history with
days and keyed records: the narrow index is built partition by partition and valid once each has
its own, the wide one is gone, a key's list walks the narrow one and finds the same records (the
outcome and the whole key checked, in the list's order), the previous release's inserts go on
beside it, a day created afterwards gets it, and the downgrade builds the wide index again."""

from __future__ import annotations

import psycopg
import pytest

from chronos.store import MessageFilter, PostgresStore, migrate
from tests.migration import helpers
from tests.migration.helpers import attached_indexes, history_days, list_ended_params

pytestmark = pytest.mark.integration

WIDE = "chronos_history_key_idx"
HEAD = "chronos_history_keyhead_idx"
LONG = b"x" * 64  # keys sharing their first 64 bytes: the index's entry cannot tell them apart

# A history insert of the release before 0016 (0015's fire statement's columns that matter here).
OLD_HISTORY_INSERT = (
    "INSERT INTO chronos_history (id, tenant, outcome, deadline, recurring, message_key) "
    "VALUES (%s, '', %s, now() - %s * interval '1 second', false, %s)"
)


def _all_valid(url: str, index: str) -> bool:
    return all(attached_indexes(url, index).values())


def _keyed_list(url: str, key: bytes, state: str = "ended") -> list[str]:
    """The ids of a key's records as the admin list pages them (through the node's store)."""
    store = PostgresStore(url)
    try:
        where = MessageFilter(state=state, key=key)
        return [r.id for r in store.find_ended(where, limit=101)]
    finally:
        store.close()


def test_migration_0016_narrows_the_key_index_and_the_downgrade_restores_it(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0015")
    history_days(database_url, 0, 3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for i in range(300):  # 100 customers' records, three each, a second apart, newest last
            conn.execute(OLD_HISTORY_INSERT, (f"old-{i}", "fired", 300 - i, b"c%d" % (i % 100)))
        conn.execute(OLD_HISTORY_INSERT, ("long-a", "fired", 5, LONG + b"a"))
        conn.execute(OLD_HISTORY_INSERT, ("long-b", "cancelled", 4, LONG + b"b"))
    before = {key: _keyed_list(database_url, key) for key in (b"c1", LONG + b"a", LONG + b"b")}
    assert before[b"c1"] == ["old-1", "old-101", "old-201"]
    assert before[LONG + b"a"] == ["long-a"] and before[LONG + b"b"] == ["long-b"]

    migrate.upgrade(database_url, "0016")
    assert _all_valid(database_url, HEAD), attached_indexes(database_url, HEAD)
    assert attached_indexes(database_url, WIDE)["chronos_history"] is None
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ANALYZE chronos_history")  # the expression's statistics: a key is rare
    where = MessageFilter(state="fired", key=b"c1")
    plan = helpers.plan(database_url, "find_ended", list_ended_params(where, ["fired"]))
    assert HEAD.removeprefix("chronos_history") in plan, plan
    after = {key: _keyed_list(database_url, key) for key in before}
    assert after == before  # the same records, in the same order
    assert _keyed_list(database_url, LONG + b"a", "cancelled") == []  # the outcome is checked
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_HISTORY_INSERT, ("beside", "fired", 0, b"c1"))  # the previous release
    assert _keyed_list(database_url, b"c1")[-1] == "beside"

    history_days(database_url, 3, 1)  # a day the leader creates after the upgrade
    assert len(attached_indexes(database_url, HEAD)) == 5 and _all_valid(database_url, HEAD)
    migrate.upgrade(database_url)  # a re-run at head changes nothing
    assert _all_valid(database_url, HEAD)

    migrate.downgrade(database_url, "0015")
    assert _all_valid(database_url, WIDE), attached_indexes(database_url, WIDE)
    assert attached_indexes(database_url, HEAD)["chronos_history"] is None
    assert _keyed_list(database_url, b"c1")[-1] == "beside"
    migrate.upgrade(database_url)
    assert _all_valid(database_url, HEAD)
