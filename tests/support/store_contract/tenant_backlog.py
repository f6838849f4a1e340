"""The store contract of the per-tenant backlog (``tenant_backlog``: admin API, tenant gauges),
run against the in-memory store (``tests/unit/testing/test_tenant_backlog_memory.py``) and the
real Postgres (``tests/integration/test_tenant_backlog_postgres.py``).

Every row's tenant is set by the harness (``set_tenant``), not by the intake, so the contract
holds whatever wrote the column; ``None`` is a row of a release before tenants.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from chronos.store import Store, TenantBacklog
from tests.support.store_contract.common import HORIZON, claims, msg, node

PARK = 2
SOON = 300  # ms: due soon, overdue after DUE_WAIT
DUE_WAIT = 600


class TenantHarness(Protocol):
    store: Store

    def now(self) -> datetime: ...

    def advance(self, ms: int) -> None: ...

    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        """Write the row's tenant column (None: NULL, a row of a release before tenants)."""


def _schedule(harness: TenantHarness, rows: dict[str, tuple[str | None, int]]) -> None:
    """Enqueue ``id -> (tenant, ms from now)`` rows and set their tenants."""
    now = harness.now()
    harness.store.enqueue(
        [msg(i, now + timedelta(milliseconds=ms)) for i, (_, ms) in rows.items()], 0
    )
    for message_id, (tenant, _) in rows.items():
        harness.set_tenant(message_id, tenant)


def _backlog_table(harness: TenantHarness) -> datetime:
    """One claimed row (tenant ``small``), one parked row (``idle``), then: ``flood`` 4 overdue
    + 1 waiting, ``small`` 1 overdue + 2 waiting, ``idle`` 3 waiting, a NULL-tenant row overdue.
    Returns when the overdue rows became due."""
    store, me = harness.store, node()
    _schedule(harness, {"c1": ("small", SOON), "p1": ("idle", SOON)})
    harness.advance(DUE_WAIT)
    rows = store.claim(me, HORIZON, 100, PARK)
    assert sorted(r.id for r in rows) == ["c1", "p1"]
    parked = [r for r in rows if r.id == "p1"]
    store.release(me, claims(parked), failed=True, errors=["refused"], park_attempts=PARK)
    parked = store.claim(me, HORIZON, 100, PARK)
    assert [r.id for r in parked] == ["p1"]
    store.release(me, claims(parked), failed=True, errors=["refused"], park_attempts=PARK)
    due_at = harness.now() + timedelta(milliseconds=SOON)
    hour = 3_600_000
    _schedule(
        harness,
        {
            **{f"f{i}": ("flood", SOON) for i in range(4)},
            "f4": ("flood", hour),
            "s1": ("small", SOON),
            **{f"s{i}": ("small", hour) for i in (2, 3)},
            **{f"i{i}": ("idle", hour) for i in range(3)},
            "legacy": (None, SOON),
        },
    )
    harness.advance(DUE_WAIT)
    return due_at


def _counts(t: TenantBacklog) -> tuple[str, int, int, int, int]:
    return (t.tenant, t.waiting, t.overdue, t.claimed, t.parked)


class TenantBacklogContract:
    def test_tenants_come_busiest_first_with_their_counts(self, harness: TenantHarness) -> None:
        due_at = _backlog_table(harness)
        result = harness.store.tenant_backlog(PARK, limit=10)
        assert [_counts(t) for t in result.tenants] == [
            ("flood", 5, 4, 0, 0),
            ("small", 3, 1, 1, 0),
            ("", 1, 1, 0, 0),  # the NULL tenant is the default tenant
            ("idle", 3, 0, 0, 1),
        ]
        assert not result.tenants_capped
        flood = result.tenants[0]
        assert flood.oldest_overdue is not None
        assert abs((flood.oldest_overdue - due_at).total_seconds()) < 0.2
        assert flood.oldest_overdue_seconds >= (DUE_WAIT - SOON) / 1000 - 0.2
        assert result.tenants[3].oldest_overdue is None
        assert result.tenants[3].oldest_overdue_seconds == 0.0

    def test_the_limit_keeps_the_busiest(self, harness: TenantHarness) -> None:
        _backlog_table(harness)
        result = harness.store.tenant_backlog(PARK, limit=2)
        assert [t.tenant for t in result.tenants] == ["flood", "small"]

    def test_counts_stop_at_the_count_limit(self, harness: TenantHarness) -> None:
        _backlog_table(harness)
        flood = harness.store.tenant_backlog(PARK, limit=1, count_limit=3).tenants[0]
        assert (flood.tenant, flood.waiting, flood.overdue) == ("flood", 3, 3)
        assert flood.waiting_capped and flood.overdue_capped

    def test_only_max_tenants_are_walked_in_name_order(self, harness: TenantHarness) -> None:
        _backlog_table(harness)
        result = harness.store.tenant_backlog(PARK, limit=10, max_tenants=1)
        assert result.tenants_capped
        assert [_counts(t) for t in result.tenants] == [
            ("flood", 5, 4, 0, 0),  # the first tenant by name
            ("", 1, 1, 0, 0),  # rows before tenants are always counted
            ("idle", 0, 0, 0, 1),  # claimed and parked rows need no walk
            ("small", 0, 0, 1, 0),
        ]

    def test_no_rows_no_tenants(self, harness: TenantHarness) -> None:
        result = harness.store.tenant_backlog(PARK, limit=10)
        assert result.tenants == []
        assert not result.tenants_capped
        assert abs((result.now - harness.now()).total_seconds()) < 5
