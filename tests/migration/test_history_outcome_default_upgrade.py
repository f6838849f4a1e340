"""Migration 0017 (the history's outcome index sets the default tenant's records apart) on a
history with days, named tenants' records and a few of the default tenant's: the new index is
built partition by partition and valid once each has its own, the old one is gone, a page of the
default tenant walks its group alone, every list finds the same records in the same order (the
default tenant's, a named one's, every tenant's), the previous release's inserts go on beside it,
a day created afterwards gets it, and the downgrade builds the old index again."""

from __future__ import annotations

import psycopg
import pytest

from chronos.store import MessageFilter, PostgresStore, migrate
from tests.migration.helpers import attached_indexes, history_days, list_ended_params, plan

pytestmark = pytest.mark.integration

OLD = "chronos_history_outcome_idx"
NEW = "chronos_history_outcome_default_idx"

# A history insert of the release before 0017 (0016's fire statement's columns that matter here).
OLD_HISTORY_INSERT = (
    "INSERT INTO chronos_history (id, tenant, outcome, deadline, recurring) "
    "VALUES (%s, %s, %s, now() - %s * interval '1 second', false)"
)
TENANTS = (None, "", "t1")  # every tenant, the default one, a named one


def _all_valid(url: str, index: str) -> bool:
    return all(attached_indexes(url, index).values())


def _lists(url: str) -> dict[str | None, list[str]]:
    """The ids of each tenant's ended records as the admin list pages them (the node's store)."""
    store = PostgresStore(url)
    try:
        return {
            tenant: [r.id for r in store.find_ended(MessageFilter("ended", tenant), limit=101)]
            for tenant in TENANTS
        }
    finally:
        store.close()


def _scan_of(url: str, tenant: str | None) -> str:
    return plan(url, "find_ended", list_ended_params(MessageFilter("fired", tenant), ["fired"]))


def test_migration_0017_groups_the_default_tenant_and_the_downgrade_restores_the_old_index(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0016")
    history_days(database_url, 0, 3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for i in range(400):  # named tenants' records, a second apart, newest last
            outcome = "cancelled" if i % 10 == 0 else "fired"
            conn.execute(OLD_HISTORY_INSERT, (f"named-{i:03}", f"t{i % 4}", outcome, 400 - i))
        for i in range(3):  # the default tenant's, among the oldest
            conn.execute(OLD_HISTORY_INSERT, (f"default-{i}", "", "fired", 450 - i))
    before = _lists(database_url)
    assert before[""] == ["default-0", "default-1", "default-2"]
    assert before["t1"][:2] == ["named-001", "named-005"] and len(before["t1"]) == 100
    assert before[None][:4] == ["default-0", "default-1", "default-2", "named-000"]

    migrate.upgrade(database_url, "0017")
    assert _all_valid(database_url, NEW), attached_indexes(database_url, NEW)
    assert attached_indexes(database_url, OLD)["chronos_history"] is None
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ANALYZE chronos_history")
    short = NEW.removeprefix("chronos_history")
    for tenant in (None, ""):  # the default tenant's group, and both groups for every tenant
        scan = _scan_of(database_url, tenant)
        assert short in scan and "= g.default_tenant)" in scan, scan  # in the index's condition
    assert _lists(database_url) == before  # the same records, in the same order
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_HISTORY_INSERT, ("default-beside", "", "fired", 0))  # previous release
    assert _lists(database_url)[""][-1] == "default-beside"

    history_days(database_url, 3, 1)  # a day the leader creates after the upgrade
    assert len(attached_indexes(database_url, NEW)) == 5 and _all_valid(database_url, NEW)
    migrate.upgrade(database_url)  # a re-run at head changes nothing
    assert _all_valid(database_url, NEW)

    migrate.downgrade(database_url, "0016")
    assert _all_valid(database_url, OLD), attached_indexes(database_url, OLD)
    assert attached_indexes(database_url, NEW)["chronos_history"] is None
    assert _lists(database_url)[""][-1] == "default-beside"
    migrate.upgrade(database_url)
    assert _all_valid(database_url, NEW)
