"""The per-tenant backlog contract against PostgresStore on the real Postgres (``harness``:
conftest.py), and the plan of the ``tenant_backlog`` query with the (tenant, deadline) ready
index: no table scan."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.support.store_contract import TenantBacklogContract

pytestmark = pytest.mark.integration

# The index of the fair claim (migration 0006), created here if the schema lacks it so that the
# plan is checked as it runs in production.
TENANT_READY_INDEX = (
    "CREATE INDEX IF NOT EXISTS chronos_messages_tenant_ready_idx "
    "ON chronos_messages (tenant, deadline) WHERE readied_at IS NULL AND parked_at IS NULL"
)


class TestPostgresTenantBacklog(TenantBacklogContract):
    pass


def _scans(plan: dict[str, object]) -> list[tuple[str, str]]:
    found = [(str(plan.get("Node Type")), str(plan.get("Relation Name", "")))]
    for child in plan.get("Plans", []):  # type: ignore[attr-defined]
        found += _scans(child)
    return found


def test_tenant_backlog_reads_indexes_only(migrated_database_url: str) -> None:
    """Many rows of a few tenants: the plan walks the tenant index, never scans the table."""
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        conn.execute(TENANT_READY_INDEX)
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, tenant, message_value) "
            "SELECT 'm' || g, now() - interval '1 minute' + g * interval '1 ms', "
            "'t' || (g % 5), 'v' FROM generate_series(1, 50000) g"
        )
        conn.execute("ANALYZE chronos_messages")
        from chronos.store.postgres.sql import query

        statement = query("tenant_backlog").rstrip().rstrip(";")
        params = {"park_attempts": 10, "limit": 10, "count_limit": 10000, "max_tenants": 1000}
        row = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
        assert row is not None
        plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
        scans = _scans(plan[0]["Plan"])
        assert ("Seq Scan", "chronos_messages") not in scans, scans
        rows = conn.execute(statement, params).fetchall()
        assert len(rows) == 5
