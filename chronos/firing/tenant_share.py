"""The claim-ahead budget shared between tenants (``chronos.firing.loop``).

While more than one tenant is known, a tenant is left out of the next claims while it holds
``TENANT_SHARE_OF_IN_FLIGHT`` of ``max_in_flight`` (rows claimed and not yet deleted or given
back: a flood whose records cannot be delivered never fills the budget) or has
``TENANT_HELD_CLAIMS`` claims' worth of timers not fired yet (the queue ahead of the others'
rows), until it holds a quarter less of both (then the loop claims at once). So a small
tenant's message is claimed (ahead of its deadline, as usual) while the flood waits in the
table. A single-tenant deployment claims ahead as far as ``max_in_flight`` allows.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.store import Store

log = logging.getLogger(__name__)

TENANT_SHARE_OF_IN_FLIGHT = 0.5
"""The part of ``max_in_flight`` one tenant may hold: the rest stays free for the others."""
TENANTS_CHECK_INTERVAL = 1.0
"""Seconds between two looks at whether more than one tenant is known (one tiny statement)."""
TENANT_HELD_CLAIMS = 4
"""...and at most this many claims' worth (``claim_batch_size`` rows each) of timers not fired
yet: the timers fire earliest deadline first, so every unfired row a flood holds that falls due
before a small tenant's is published before it; they are the small tenant's queue. Four claims'
worth keeps that queue a fraction of a second at the node's firing rate. Rows already handed
to the producer queue nobody's timers: a flood draining overdue rows fires each claim at once and
claims again as the control does (capping them as well held its drain 10-25 % below it)."""


class TenantShare:
    """The rows this node holds per tenant, and which tenants the next claim leaves out."""

    def __init__(
        self, settings: Settings, store: Store, unfired: Callable[[], Mapping[str, int]]
    ) -> None:
        self.store = store
        self.unfired = unfired  # the dispatcher's timers not fired yet, per tenant
        self.held_by_tenant: Counter[str] = Counter()  # rows held, as the loop's held_bytes
        self.cap = max(1, int(settings.max_in_flight * TENANT_SHARE_OF_IN_FLIGHT))
        self.queue_cap = max(1, min(self.cap, TENANT_HELD_CLAIMS * settings.claim_batch_size))
        self.several_tenants = False  # more than one tenant known: the budget is shared
        self.checked_at = -TENANTS_CHECK_INTERVAL
        self.held_back: set[str] = set()  # tenants the previous claim left out (their share held)

    def excluded(self, now: float) -> list[str]:
        """The tenants holding their share of the claim-ahead budget, while more than one tenant
        is known (checked every ``TENANTS_CHECK_INTERVAL``): a node that only ever sees the
        default tenant claims ahead as far as ``max_in_flight`` allows, as before tenants."""
        if now - self.checked_at >= TENANTS_CHECK_INTERVAL:
            try:
                self.several_tenants = self.store.several_tenants()
                self.checked_at = now
            except StoreError as exc:  # keep the last answer; the claim will report the outage
                log.debug("could not count the known tenants: %s", exc)
        if not self.several_tenants:
            return []
        over = {t for t, n in self.held_by_tenant.items() if n >= self.cap}
        over.update(t for t, n in self.unfired().items() if n >= self.queue_cap)
        return sorted(over)

    def freed(self) -> bool:
        """A tenant the previous claim left out now holds a quarter less of both its share and
        its queue: claim for it at once rather than after the poll interval (its backlog drains
        without a gap)."""
        if not self.held_back:
            return False
        unfired = self.unfired()
        return any(
            self.held_by_tenant[t] <= self.cap * 3 // 4
            and unfired.get(t, 0) <= self.queue_cap * 3 // 4
            for t in self.held_back
        )

    def claimed(self, tenants: Iterable[str]) -> None:
        self.held_by_tenant.update(tenants)

    def released(self, tenants: Iterable[str]) -> None:
        self.held_by_tenant.subtract(tenants)
        self.held_by_tenant = +self.held_by_tenant  # drop the tenants that hold nothing
