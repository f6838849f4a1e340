"""Migration 0015 (the history's tenant index made partial: named tenants only) on a history with
days and records: the partial index is built partition by partition and valid once each has its
own, the full one is gone, a named tenant's reads walk the partial one and the default tenant's
are still found, a day created afterwards gets it, the drop waits for a transaction holding the
table, and the downgrade builds the full index again."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from chronos.store import migrate
from chronos.store.postgres.sql import query
from tests.migration.helpers import attached_indexes, history_days, plan

pytestmark = pytest.mark.integration

FULL = "chronos_history_tenant_idx"
PARTIAL = "chronos_history_tenanted_idx"
HOLD_S = 5  # longer than one try's lock timeout (2 s)

# A history insert of the release before 0015 (0014's cancel_message's).
OLD_HISTORY_INSERT = (
    "INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, ended_by, recurring, "
    "message_key) VALUES (%s, %s, 'cancelled', now(), 'admin', 'alice', false, 'k')"
)


def _all_valid(url: str, index: str) -> bool:
    return all(attached_indexes(url, index).values())


def _entries(url: str, index: str) -> int:
    """Entries of the partitions' indexes attached to ``index`` (exact: a fresh count)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE chronos_history")
        row = conn.execute(
            "SELECT coalesce(sum(c.reltuples), 0)::int FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            (index,),
        ).fetchone()
    return row[0] if row else 0


def test_migration_0015_indexes_the_named_tenants_only_and_the_downgrade_restores_it(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0014")
    history_days(database_url, 0, 3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        for i in range(20):
            conn.execute(OLD_HISTORY_INSERT, (f"default-{i}", ""))
        conn.execute(OLD_HISTORY_INSERT, ("acme-0", "acme"))
    assert _entries(database_url, FULL) == 21
    migrate.upgrade(database_url, "0015")
    assert _all_valid(database_url, PARTIAL), attached_indexes(database_url, PARTIAL)
    assert attached_indexes(database_url, FULL)["chronos_history"] is None
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_HISTORY_INSERT, ("acme-1", "acme"))  # a node of the previous release
        conn.execute(OLD_HISTORY_INSERT, ("default-beside", ""))
    assert _entries(database_url, PARTIAL) == 2  # acme's two records; none of the 21 default
    named = plan(database_url, "count_tenant_history", {"tenant": "acme", "limit": 10})
    assert PARTIAL.removeprefix("chronos_history") in named, named
    with psycopg.connect(database_url) as conn:
        counts = {
            tenant: conn.execute(
                query("count_tenant_history"), {"tenant": tenant, "limit": 100}
            ).fetchone()
            for tenant in ("acme", "")
        }
    assert counts == {"acme": (2,), "": (21,)}
    history_days(database_url, 3, 1)  # a day the leader creates after the upgrade
    assert len(attached_indexes(database_url, PARTIAL)) == 5 and _all_valid(database_url, PARTIAL)
    migrate.upgrade(database_url)  # a re-run at head changes nothing
    assert _all_valid(database_url, PARTIAL)
    migrate.downgrade(database_url, "0014")
    assert _all_valid(database_url, FULL), attached_indexes(database_url, FULL)
    assert attached_indexes(database_url, PARTIAL)["chronos_history"] is None
    assert _entries(database_url, FULL) == 23
    migrate.upgrade(database_url)
    assert _all_valid(database_url, PARTIAL)


def test_migration_0015_waits_for_a_transaction_holding_the_history_then_drops_the_old_index(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0014")
    history_days(database_url, 0, 2)
    held = threading.Event()

    def hold() -> None:  # a long admin read of the history: the drop must wait for it
        with psycopg.connect(database_url) as conn:
            conn.execute("SELECT count(*) FROM chronos_history")
            held.set()
            time.sleep(HOLD_S)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    started = time.monotonic()
    migrate.upgrade(database_url, "0015")
    waited = time.monotonic() - started
    holder.join()
    assert waited >= HOLD_S - 0.5, waited  # it waited out the reader, longer than one try
    assert _all_valid(database_url, PARTIAL)
    assert attached_indexes(database_url, FULL)["chronos_history"] is None
