"""Per-tenant metrics with a bounded number of series.

A tenant name is free text from a message header, so one label per tenant would let any producer
create series without limit. Two families keep the cardinality bounded:

* **fired messages and their lateness** (``chronos_tenant_fired_messages_total``,
  ``chronos_tenant_fire_lateness_seconds``), observed by the firing loop once per deleted batch
  on every node. At most ``tenant_metrics_top`` tenants have a label of their own; every other
  tenant is counted under ``_other``. The rule, chosen to keep series churn low:

  - a tenant seen while a label slot is free takes it at once (so a node with few tenants shows
    them all from its first batch);
  - once all slots are taken, labels change only when a window of ``WINDOW_S`` (10 min) ends:
    the window's busiest tenants (by fired messages) that have no label replace the labelled
    tenants that fired the fewest messages in that window, one for one, and only when the
    newcomer fired more. An evicted tenant's series are removed (Prometheus sees them end; a
    ``rate()`` over them is unaffected) and it is counted under ``_other`` from then on;
  - a label is kept for the life of the process otherwise, so at most ``top`` tenants change
    label per window and a stable set of busy tenants never churns.

  The per-window counts are kept for at most ``COUNTED_TENANTS`` tenants (the least busy are
  forgotten first), so the memory is bounded too.

* **overdue rows** (``chronos_tenant_overdue_messages``,
  ``chronos_tenant_oldest_overdue_message_age_seconds``), set by the leader's backlog refresh
  (``chronos.cluster.monitor``) for the ``tenant_metrics_top`` tenants with the most overdue rows;
  the
  series of a tenant that leaves the top are removed at the next refresh, so at most ``top``
  series exist at once. Like the other backlog gauges they describe the shared table: the leader
  reports them, the other nodes report none (aggregate with ``max()``); with several shards,
  every shard's added up (``TenantGauges``).

The default tenant (no ``chronosTenant`` header, or rows of a release before tenants) has the
label ``""``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from chronos.observability.metrics import (
    TENANT_BACKLOG_CAPPED,
    TENANT_FIRED,
    TENANT_LATENESS,
    TENANT_OLDEST_OVERDUE,
    TENANT_OVERDUE,
    remove_series,
)

OTHER = "_other"
WINDOW_S = 600.0
COUNTED_TENANTS = 10_000


def tenant_label(tenant: str) -> str:
    """The label value of a tenant's own series: its name, with one more leading ``_`` when it
    starts with ``_``, so that no tenant (not even one named ``_other``) shares a series with
    ``OTHER``."""
    return "_" + tenant if tenant.startswith("_") else tenant


class TenantLabels:
    """Which tenants have a label of their own (at most ``top``); see the module's rule."""

    def __init__(
        self,
        top: int,
        *,
        window_s: float = WINDOW_S,
        counted: int = COUNTED_TENANTS,
        monotonic: Callable[[], float] = time.monotonic,
        on_evict: Callable[[str], None] = lambda tenant: None,
    ):
        if top < 1:
            raise ValueError("top must be at least 1")
        self.top = top
        self.window_s = window_s
        self.counted = max(counted, 2 * top)
        self.monotonic = monotonic
        self.on_evict = on_evict
        self.labelled: set[str] = set()
        self.window: Counter[str] = Counter()
        self.window_ends = monotonic() + window_s

    def label(self, tenant: str, count: int = 1) -> str:
        """Count ``count`` fired messages of ``tenant``; the label to record them under."""
        self.window[tenant] += count
        if len(self.window) > self.counted:
            self.window = Counter(dict(self.window.most_common(self.counted // 2)))
        if tenant in self.labelled:
            return tenant_label(tenant)
        if len(self.labelled) < self.top:
            self.labelled.add(tenant)
            return tenant_label(tenant)
        return OTHER

    def roll(self) -> list[str]:
        """End the window if it is over: promote its busiest unlabelled tenants in place of the
        least busy labelled ones. Returns the evicted tenants."""
        now = self.monotonic()
        if now < self.window_ends:
            return []
        self.window_ends = now + self.window_s
        window, self.window = self.window, Counter()
        newcomers = [t for t, _ in window.most_common(self.top) if t not in self.labelled]
        quietest = sorted(self.labelled, key=lambda t: (window[t], t))
        evicted: list[str] = []
        for newcomer, incumbent in zip(newcomers, quietest, strict=False):
            if window[newcomer] <= window[incumbent]:
                break
            self.labelled.discard(incumbent)
            self.labelled.add(newcomer)
            evicted.append(incumbent)
            self.on_evict(incumbent)
        return evicted


class TenantMetrics:
    """The firing loop's per-tenant counters: ``observe_fired`` once per fired batch."""

    def __init__(
        self,
        top: int,
        *,
        window_s: float = WINDOW_S,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._lock = threading.Lock()
        self.labels = TenantLabels(
            top, window_s=window_s, monotonic=monotonic, on_evict=self._remove
        )

    @staticmethod
    def _remove(tenant: str) -> None:
        for family in (TENANT_FIRED, TENANT_LATENESS):
            remove_series(family, tenant_label(tenant))  # perhaps never recorded on this node

    def observe_fired(self, fired: Iterable[tuple[str, float]]) -> None:
        """Record fired messages as (tenant, lateness in seconds) pairs."""
        with self._lock:
            self.labels.roll()
            by_tenant: dict[str, list[float]] = {}
            for tenant, lateness in fired:
                values = by_tenant.get(tenant)
                if values is None:
                    by_tenant[tenant] = [lateness]
                else:
                    values.append(lateness)
            # One label decision per tenant and batch, in the order the tenants first appear
            # (so free label slots go to the same tenants as one decision per message would).
            by_label: dict[str, list[float]] = {}
            for tenant, values in by_tenant.items():
                label = self.labels.label(tenant, len(values))
                if label in by_label:
                    by_label[label].extend(values)
                else:
                    by_label[label] = values
            for label, values in by_label.items():  # one series lookup per label and batch
                TENANT_LATENESS.observe_many(values, (label,))
                TENANT_FIRED.labels(label).inc(len(values))


class OverdueTenant(Protocol):
    """What the gauges read of one tenant's backlog (the store's ``TenantBacklog``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def overdue(self) -> int: ...
    @property
    def oldest_overdue_seconds(self) -> float: ...


class TenantGauges:
    """The leaders' per-tenant overdue gauges: only the latest top tenants have series. With
    several shards each shard's leader publishes its own shard's top tenants (``shard``); the
    gauges show their sum (a tenant's overdue rows added up, its oldest the oldest of all), the
    ``top`` tenants of it (default: as many as the longest list)."""

    def __init__(self, top: int | None = None) -> None:
        self.shown: set[str] = set()
        self.top = top
        self._parts: dict[int, tuple[list[OverdueTenant], bool]] = {}
        self._lock = threading.Lock()

    def publish(
        self, tenants: Sequence[OverdueTenant], *, capped: bool = False, shard: int = 0
    ) -> None:
        """Show ``tenants`` (shard ``shard``'s top N by overdue rows) with the other shards';
        remove the series of the others. ``capped``: the statement looked at only some of the
        tenants with waiting rows."""
        with self._lock:
            self._parts[shard] = (list(tenants), capped)
            self._show()

    def clear(self, shard: int | None = None) -> None:
        """Forget shard ``shard``'s part (None: every shard's)."""
        with self._lock:
            if shard is None:
                self._parts.clear()
            else:
                self._parts.pop(shard, None)
            self._show()

    def _show(self) -> None:
        overdue: Counter[str] = Counter()
        oldest: dict[str, float] = {}
        for tenants, _ in self._parts.values():
            for t in tenants:
                if t.overdue > 0:
                    overdue[t.tenant] += t.overdue
                    oldest[t.tenant] = max(oldest.get(t.tenant, 0.0), t.oldest_overdue_seconds)
        top = self.top or max((len(ts) for ts, _ in self._parts.values()), default=0)
        current = {tenant for tenant, _ in overdue.most_common(top)}
        capped = any(c for _, c in self._parts.values())
        TENANT_BACKLOG_CAPPED.set(1 if capped else 0)
        for tenant in self.shown - current:
            _remove_gauges(tenant)
        for tenant in current:
            TENANT_OVERDUE.labels(tenant_label(tenant)).set(overdue[tenant])
            TENANT_OLDEST_OVERDUE.labels(tenant_label(tenant)).set(oldest[tenant])
        self.shown = current


def _remove_gauges(tenant: str) -> None:
    for gauge in (TENANT_OVERDUE, TENANT_OLDEST_OVERDUE):
        remove_series(gauge, tenant_label(tenant))
