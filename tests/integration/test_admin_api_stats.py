"""The admin API's statistics on the real Postgres: the stats endpoint, the backlog gauges (exact
and estimated), the tenants endpoint with the leader's tenant gauges, and the plans of the
backlog and list queries."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import REGISTRY
from psycopg import ClientCursor

from chronos.cluster.monitor import Monitor
from chronos.store.postgres.sql import query
from tests.integration.admin_api import (
    PARK,
    Api,
    make_overdue,
    message,
    seed,
    seed_states,
)

pytestmark = pytest.mark.integration


def test_stats_counts_states_overdue_and_deadlines(api: Api) -> None:
    seed_states(api)
    status, body = api.get("/admin/v1/stats")
    assert status == 200
    assert (body["waiting"], body["claimed"], body["parked"], body["overdue"]) == (7, 2, 2, 2)
    assert body["waiting_exact"] and body["parked_exact"] and body["overdue_exact"]
    assert 119 <= body["oldest_overdue_age_seconds"] < 180
    assert body["park_attempts"] == PARK
    oldest = datetime.fromisoformat(body["oldest_deadline"])
    newest = datetime.fromisoformat(body["newest_deadline"])
    now = datetime.fromisoformat(body["database_time"])
    assert now - timedelta(minutes=11) < oldest < now - timedelta(minutes=9)  # m9, parked
    assert newest > now + timedelta(minutes=69)  # m10
    assert api.get("/admin/v1/stats?x=1")[0] == 400


def test_stats_of_an_empty_table(api: Api) -> None:
    status, body = api.get("/admin/v1/stats")
    assert status == 200
    assert (body["waiting"], body["claimed"], body["parked"], body["overdue"]) == (0, 0, 0, 0)
    assert body["oldest_overdue_age_seconds"] == 0
    assert body["oldest_deadline"] is None and body["newest_deadline"] is None


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


def test_backlog_gauges_on_seeded_data(api: Api) -> None:
    seed_states(api)
    backlog = Monitor(api.settings, api.store).refresh_backlog()
    assert backlog is not None
    assert gauge("chronos_waiting_messages") == 7
    assert gauge("chronos_claimed_messages") == 2
    assert gauge("chronos_parked_messages") == 2
    assert gauge("chronos_overdue_messages") == 2
    assert gauge("chronos_backlog_exact") == 1
    age = gauge("chronos_oldest_overdue_message_age_seconds")
    assert age is not None and 119 <= age < 180
    assert abs((gauge("chronos_backlog_last_success_timestamp_seconds") or 0) - time.time()) < 60
    # The same numbers on the metrics endpoint.
    _, text = api.get("/metrics", token=None)
    assert b"chronos_waiting_messages 7.0" in text
    # Nothing overdue: the age is 0.
    api.sql("DELETE FROM chronos_messages WHERE id IN ('m0', 'm1')")
    Monitor(api.settings, api.store).refresh_backlog()
    assert gauge("chronos_oldest_overdue_message_age_seconds") == 0
    assert gauge("chronos_overdue_messages") == 0


def test_the_waiting_count_is_an_estimate_above_the_exact_threshold(api: Api) -> None:
    base = datetime.now(UTC) + timedelta(hours=1)
    seed(api, [message(f"e{i}", base + timedelta(seconds=i)) for i in range(300)])
    api.sql("ANALYZE chronos_messages")
    exact = api.store.backlog(PARK, exact_below=1000, count_limit=50)
    assert (exact.unclaimed, exact.unclaimed_exact) == (300, True)
    estimated = api.store.backlog(PARK, exact_below=100, count_limit=50)
    assert not estimated.unclaimed_exact
    assert 100 <= estimated.unclaimed <= 600  # the planner's estimate, at least the bound
    make_overdue(api, [f"e{i}" for i in range(80)], 10)
    capped = api.store.backlog(PARK, exact_below=1000, count_limit=50)
    assert (capped.overdue, capped.overdue_capped) == (50, True)


def test_tenants_over_http_and_the_leaders_tenant_gauges(api: Api) -> None:
    """Per tenant: waiting, overdue, claimed, parked; NULL (rows before tenants) is ''."""
    seeded = seed_states(api)
    api.sql("UPDATE chronos_messages SET tenant = 'acme' WHERE id IN ('m0', 'm1', 'm2', 'm7')")
    api.sql("UPDATE chronos_messages SET tenant = 'zeta' WHERE id IN ('m3', 'm9')")
    api.sql("UPDATE chronos_messages SET tenant = NULL WHERE id IN ('m4', 'm5', 'm6', 'm8')")
    status, body = api.get("/admin/v1/tenants?limit=10")
    assert status == 200 and body["tenants_complete"] and body["limit"] == 10
    rows = {t["tenant"]: t for t in body["tenants"]}
    assert [t["tenant"] for t in body["tenants"]] == ["acme", "", "zeta"]
    counts = {k: (v["waiting"], v["overdue"], v["claimed"], v["parked"]) for k, v in rows.items()}
    # m10 is parked with the default tenant ''; m9 (parked, overdue) never counts as overdue.
    assert counts == {"acme": (3, 2, 1, 0), "": (3, 0, 1, 1), "zeta": (1, 0, 0, 1)}
    assert 119 <= rows["acme"]["oldest_overdue_age_seconds"] < 180
    assert rows[""]["oldest_overdue_age_seconds"] == 0
    assert [t["tenant"] for t in api.get("/admin/v1/tenants?limit=1")[1]["tenants"]] == ["acme"]
    assert api.get("/admin/v1/tenants?limit=0")[0] == 400
    assert len(seeded.claimed) == 2

    monitor = Monitor(api.settings, api.store)
    assert monitor.refresh_tenants() is not None
    assert REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "acme"}) == 2
    age = REGISTRY.get_sample_value(
        "chronos_tenant_oldest_overdue_message_age_seconds", {"tenant": "acme"}
    )
    assert age is not None and 119 <= age < 180
    assert REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "zeta"}) is None
    monitor.tenant_gauges.clear()


def _plan(database_url: str, name: str, params: dict[str, Any]) -> str:
    with psycopg.connect(database_url, autocommit=True, cursor_factory=ClientCursor) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + query(name), params).fetchall()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("backlog", {"park_attempts": PARK, "exact_below": 100_000, "count_limit": 10_000}),
        *[
            (
                name,
                {
                    "park_attempts": PARK,
                    "limit": 101,
                    "deadline_from": None,
                    "deadline_to": None,
                    "after_deadline": datetime.now(UTC),
                    "after_id": "x",
                    "max_bytes": 4 * 1024 * 1024,
                },
            )
            for name in ("list_waiting", "list_parked", "list_claimed", "list_all")
        ],
    ],
)
def test_backlog_and_list_queries_never_scan_the_table(
    api: Api, name: str, params: dict[str, Any]
) -> None:
    """With sequential scans priced out, every part of these statements has an index path: none
    reads the whole table (on millions of rows the planner picks the same index paths)."""
    seed_states(api)
    api.sql("ANALYZE chronos_messages")
    plan = _plan(api.database_url, name, params)
    assert "Seq Scan on chronos_messages" not in plan, plan
