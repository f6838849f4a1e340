"""The pause set as one node sees it: read from the store every ``PAUSE_REFRESH_S`` by the firing
loop (every ``RESUME_REFRESH_S`` while something is paused, so that a resume frees its messages
at once), passed to its claims (which skip the paused tenants and topics), and checked against the
rows it already holds (claimed ahead before the pause: given back, not fired).

Until the pause set has been read, and while a read fails (a role without the grant on
``chronos_pauses``), the loop claims nothing: a node that cannot know what is paused never fires
paused work (``FLOW_CONTROL``: a warning, ``chronos_dependency_up{dependency="flow_control"}``,
not ready).

Each read also sets ``chronos_paused_since_timestamp_seconds`` (one series per pause, removed on
resume), on every node alike: aggregate it with ``max()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.observability.dependencies import FLOW_CONTROL
from chronos.store import PAUSE_REFRESH_S, RESUME_REFRESH_S, ClaimedRow, Pause, PauseSet, Store

log = logging.getLogger(__name__)


class PauseWatch:
    def __init__(self, store: Store, output_topic: str, max_lateness_ms: int | None) -> None:
        self.store = store
        self.output_topic = output_topic
        self.max_lateness_ms = max_lateness_ms
        self.current = PauseSet()
        self.known = False  # False until read, and while a read fails: claim nothing then
        self.read_at: float | None = None
        self._series: set[tuple[str, str]] = set()

    def due(self, now: float) -> bool:
        every = RESUME_REFRESH_S if self.current else PAUSE_REFRESH_S
        return self.read_at is None or now - self.read_at >= every

    def refresh(self, now: float) -> bool:
        """Read the pause set; True when something new is paused (the held rows are checked)."""
        try:
            pauses = self.store.pauses()
        except StoreError as exc:
            self.known = False
            flow_control_unreadable("the pauses", exc)
            return False
        self.known = True
        self.read_at = now
        self._gauge(pauses)
        fresh = PauseSet.of(pauses, self.output_topic)
        added = not (fresh.tenants <= self.current.tenants and fresh.topics <= self.current.topics)
        if fresh != self.current:
            log.info(
                "pauses in force: tenants %s, topics %s",
                sorted(fresh.tenants),
                sorted(fresh.topics),
                extra={"event": "pauses_changed"},
            )
        self.current = fresh
        return added

    def holds(self, claimed_at: Callable[[], float]) -> Callable[[ClaimedRow], bool]:
        """Whether a held row is paused and not yet past its expiry limit (an expired one is
        fired: dead-lettered as expired), ``claimed_at`` giving the monotonic time now."""
        paused = self.current
        now = claimed_at()

        def wanted(row: ClaimedRow) -> bool:
            if not paused.holds(row.tenant, row.target_topic):
                return False
            limit = row.expires_ms if row.expires_ms is not None else self.max_lateness_ms
            if limit is None:
                return True
            lateness = now - row.claimed_monotonic - row.remaining_ms / 1000
            return lateness <= limit / 1000

        return wanted

    def _gauge(self, pauses: list[Pause]) -> None:
        series = set()
        for p in pauses:
            key = (p.kind.value, p.name)
            series.add(key)
            metrics.PAUSED_SINCE.labels(*key).set(p.paused_at.timestamp())
        for gone in self._series - series:
            metrics.remove_series(metrics.PAUSED_SINCE, *gone)
        self._series = series


def flow_control_unreadable(what: str, exc: StoreError) -> None:
    """A read of the pauses or limits failed: the firing loop claims nothing until it succeeds.
    An outage of Postgres is announced as such (the claim fails too); anything else (a missing
    grant, a missing table) is this dependency's: a warning, its gauge at 0, not ready."""
    if exc.outage:  # Postgres away: announced as such, and the claims fail too
        log.debug("could not read %s: %s", what, exc)
        return
    FLOW_CONTROL.failed(f"cannot read {what}, so nothing is claimed: {exc}")
