"""The backlog as the leader measures it (its gauges) and the admin API shows it: the whole
table's and the busiest tenants'. Re-exported from ``chronos.store``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Backlog:
    """The table's backlog, measured without a table scan (see the ``backlog`` query).

    ``unclaimed`` is exact when ``unclaimed_exact``, else the planner's live-row estimate less
    the claimed rows; ``parked`` and ``overdue`` are exact unless capped at the count limit.
    """

    now: datetime  # the database clock
    estimated_rows: int | None
    unclaimed: int  # waiting + parked
    unclaimed_exact: bool
    claimed: int
    parked: int
    parked_capped: bool
    overdue: int  # waiting rows past their deadline
    overdue_capped: bool
    oldest_overdue: datetime | None
    oldest_deadline: datetime | None
    newest_deadline: datetime | None

    @property
    def waiting(self) -> int:
        return max(0, self.unclaimed - self.parked)

    @property
    def oldest_overdue_seconds(self) -> float:
        """now - the deadline of the oldest overdue waiting row; 0 when none is overdue."""
        if self.oldest_overdue is None:
            return 0.0
        return max(0.0, (self.now - self.oldest_overdue).total_seconds())


@dataclass(frozen=True, slots=True)
class TenantBacklog:
    """One tenant's part of the backlog (see the ``tenant_backlog`` query). ``waiting`` and
    ``overdue`` are exact unless capped at the count limit; ``parked`` counts at most the count
    limit over all tenants. The default tenant is ``''`` (rows written before tenants too)."""

    tenant: str
    now: datetime  # the database clock
    waiting: int  # unclaimed, not parked
    waiting_capped: bool
    overdue: int  # waiting rows past their deadline
    overdue_capped: bool
    oldest_overdue: datetime | None
    claimed: int
    parked: int

    @property
    def oldest_overdue_seconds(self) -> float:
        """now - the deadline of the tenant's oldest overdue waiting row; 0 when none."""
        if self.oldest_overdue is None:
            return 0.0
        return max(0.0, (self.now - self.oldest_overdue).total_seconds())


@dataclass(frozen=True, slots=True)
class TenantBacklogs:
    """The busiest tenants (most overdue rows first, then most waiting rows, then by name)."""

    now: datetime
    tenants: list[TenantBacklog]
    tenants_capped: bool  # more tenants have waiting rows than the query looked at
