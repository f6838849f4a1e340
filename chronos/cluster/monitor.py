"""A node's monitor: its heartbeat, the election and the backlog gauges.

A thread started by the node (not one of the three loops: it never touches a message) that

* writes the node's heartbeat row (``chronos_nodes``) every second, renewing the node's lease
  (see ``chronos.cluster.leadership``), and deletes the row at graceful shutdown; the row carries
  the node's fire rate over the last ``FIRE_RATE_WINDOW_S`` (``chronos_fired_messages_total``
  over the window), which the admin API sums over the live nodes into the cluster's rate;
* after each heartbeat works out the leader: the lowest node id whose heartbeat is younger than
  ``liveness_window_ms`` on the database clock (``chronos_leader`` is 1 on it);
* on the leader only: forgets nodes silent for an hour (killed, never shut down) and refreshes
  the backlog gauges every ``BACKLOG_INTERVAL_S`` (5 s), or less often when their statements
  are slow (``gauge_interval``: they take at most ``GAUGE_BUSY_SHARE`` of the time, refreshed
  every 30 s at the least), with one statement that never scans the table (see the ``backlog``
  query): claimed rows through the claimed index, the oldest overdue
  deadline through the due index, parked rows through the failed-publish index, and waiting rows
  counted exactly while the planner's estimate is below ``EXACT_COUNT_BELOW`` (100k), the
  estimate above. They describe the shared table: the leader reports them and the other nodes
  report 0, so aggregate them with ``max()``, not ``sum()``;
* the history's partitions, created ahead and dropped past their time to live
  (``chronos.cluster.history``);
* the messages table's vacuum every ``vacuum_interval_ms`` while it has dead rows, on a thread
  of its own (``chronos.cluster.vacuum``);
* with the backlog gauges, the per-tenant overdue gauges of the ``tenant_metrics_top`` tenants
  with the most overdue rows (``chronos.observability.tenants``), from one bounded statement (see
  the
  ``tenant_backlog`` query).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

from chronos import __version__
from chronos.cluster.history import HistoryKeeper
from chronos.cluster.leadership import Leadership
from chronos.cluster.vacuum import Vacuum
from chronos.config.policy import park_after
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.observability.tenants import TenantGauges
from chronos.store import COUNT_LIMIT, EXACT_COUNT_BELOW, Backlog, Store, TenantBacklogs

log = logging.getLogger(__name__)


def delivered_ago() -> float | None:
    """Seconds since this node last had a fired record delivered (None: not yet)."""
    at = next((s.value for f in metrics.DELIVERED_AT.collect() for s in f.samples), 0.0)
    return None if at <= 0 else max(0.0, time.time() - at)


def fired_total() -> float:
    """This node's ``chronos_fired_messages_total``."""
    for family in metrics.FIRED.collect():
        for sample in family.samples:
            if sample.name == "chronos_fired_messages_total":
                return sample.value
    return 0.0


HEARTBEAT_INTERVAL_S = 1.0
BACKLOG_INTERVAL_S = 5.0
GAUGE_BUSY_SHARE = 0.05
"""The share of the time the leader's gauge statements may take. Counting a table of 95,000
waiting rows and ten tenants' 9,500 each, on a loaded database, took 0.75 s a round (an hour's
soak on two shared cores: busy 15 % of the time at a round every 5 s, and eight of its ten
slowest minutes had a round over a second); past 0.25 s a round, the rounds space out to keep
them to this share."""
BACKLOG_MAX_INTERVAL_S = 30.0  # half a minute at most: ChronosBacklogGaugesStale fires at 60 s
NODE_RETENTION_S = 3600.0
TENANT_PRUNE_INTERVAL_S = 60.0  # how often the leader forgets tenants with nothing waiting
TENANT_PRUNE_LIMIT = 10_000  # tenants forgotten per round at most (one index probe each)
_WARN_EVERY_S = 30.0
FIRE_RATE_WINDOW_S = 10.0  # the fire rate a heartbeat carries is over this many seconds


def gauge_interval(interval: float, spent: float) -> float:
    """When the leader's next gauge round is due after one that took ``spent`` seconds: every
    ``interval``; after a round slower than ``GAUGE_BUSY_SHARE`` of the default interval (a
    quarter of a second), so that the rounds take at most that share of the time, within
    ``BACKLOG_MAX_INTERVAL_S``."""
    if spent <= GAUGE_BUSY_SHARE * BACKLOG_INTERVAL_S:
        return interval
    return min(max(interval, spent / GAUGE_BUSY_SHARE), max(interval, BACKLOG_MAX_INTERVAL_S))


class Monitor:
    """Heartbeat and backlog gauges of one node, on a thread of their own."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        leadership: Leadership | None = None,
        *,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
        backlog_interval: float = BACKLOG_INTERVAL_S,
        fired: Callable[[], float] = fired_total,
        delivered: Callable[[], float | None] = delivered_ago,
        shard: int = 0,
        tenant_gauges: TenantGauges | None = None,
    ):
        self.settings = settings
        # Its shard: the backlog and tenant gauges add up every shard's (docs/shards.md), its
        # lanes' monitors sharing the node's ``tenant_gauges``.
        self.shard = shard
        self.store = store
        self.node_id = settings.node_id
        self.leadership = leadership or Leadership(settings.node_id, settings.liveness_window_ms)
        self.heartbeat_interval = heartbeat_interval
        self.backlog_interval = backlog_interval
        self.hostname = socket.gethostname()[:255]
        self.last_backlog: Backlog | None = None
        self.last_tenants: TenantBacklogs | None = None
        self.tenant_gauges = tenant_gauges or TenantGauges()
        self._next_maintenance = 0.0  # monotonic
        self._next_prune = 0.0  # monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned_at: dict[str, float] = {}
        self._fired = fired
        self._delivered = delivered
        self._fired_samples: deque[tuple[float, float]] = deque()  # (monotonic, fired)
        self.history = HistoryKeeper(store, settings.history_ttl)  # the leader keeps it
        # ...and vacuums the messages table, on a thread of its own.
        self.vacuum = Vacuum(store, settings.vacuum_interval_ms, self.leadership.is_leader, shard)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="chronos-monitor", daemon=True)
        self._thread.start()
        self.vacuum.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the thread, which deletes this node's heartbeat row as it ends (the node leaves
        the live nodes). Waits at most ``timeout`` s: a hung database never delays shutdown."""
        self._stop.set()
        self.vacuum.stop(0)
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.tick(started)
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, self.heartbeat_interval - elapsed))
        self.leave()

    def tick(self, now: float) -> None:
        """One round: heartbeat, election, and the leader's periodic maintenance when due."""
        self.beat()
        if not self.elect():
            self._next_maintenance = 0.0  # at once on becoming the leader
            self.history.next_at = 0.0
            return
        if now >= self._next_maintenance:
            started = time.monotonic()
            self.refresh_backlog()
            self.refresh_tenants()
            self.expire_nodes()
            spent = time.monotonic() - started
            self._next_maintenance = now + gauge_interval(self.backlog_interval, spent)
        if now >= self._next_prune:
            self.prune_tenants()
            self._next_prune = now + TENANT_PRUNE_INTERVAL_S
        self.history.tick(now)

    # -- the work ------------------------------------------------------------------------------

    def beat(self) -> bool:
        sent_at = (
            self.leadership.monotonic()
        )  # before the statement: see chronos.cluster.leadership
        try:
            self.store.heartbeat(
                self.node_id,
                hostname=self.hostname,
                version=__version__,
                fired_per_second=self.fire_rate(sent_at),
                fired_ago_s=self._delivered(),
            )
        except StoreError as exc:
            self.leadership.unanswered(sent_at)  # a stall, as this node sees it, until one works
            self._failed("heartbeat", exc)
            return False
        self.leadership.renew(sent_at)  # a heartbeat held up past STALL_S was a stall too
        metrics.HEARTBEAT_UPDATED.set(time.time())
        return True

    def fire_rate(self, now: float) -> float | None:
        """Messages fired per second over the last FIRE_RATE_WINDOW_S (since the oldest call
        within it; None at the first call)."""
        fired = self._fired()
        samples = self._fired_samples
        while len(samples) > 1 and samples[1][0] <= now - FIRE_RATE_WINDOW_S:
            samples.popleft()
        oldest = samples[0] if samples else None
        samples.append((now, fired))
        if oldest is None or now <= oldest[0]:
            return None
        return max(0.0, fired - oldest[1]) / (now - oldest[0])

    def elect(self) -> bool:
        """Work out the leader; True if it is this node. Not the leader when unsure."""
        was_leader = self.leadership.is_leader()
        try:
            leader = self.store.elect_leader(self.settings.liveness_window_ms)
        except StoreError as exc:
            self._failed("elect_leader", exc)
            leader = None
        leads = self.leadership.elected(leader)
        if was_leader and not leads:
            clear_backlog(self.shard)  # only the leader reports the shared table
            self.tenant_gauges.clear(self.shard)
            self.history.lost_leadership()
        return leads

    def refresh_backlog(self) -> Backlog | None:
        started = time.perf_counter()
        try:
            backlog = self.store.backlog(
                park_after(self.settings),
                exact_below=EXACT_COUNT_BELOW,
                count_limit=COUNT_LIMIT,
            )
        except StoreError as exc:
            self._failed("backlog", exc)
            return None
        metrics.STATEMENT_DURATION.labels("backlog").observe(time.perf_counter() - started)
        publish_backlog(backlog, self.shard)
        self.last_backlog = backlog
        return backlog

    def refresh_tenants(self) -> TenantBacklogs | None:
        started = time.perf_counter()
        try:
            tenants = self.store.tenant_backlog(
                park_after(self.settings),
                limit=self.settings.tenant_metrics_top,
                count_limit=COUNT_LIMIT,
            )
        except StoreError as exc:
            self._failed("tenant_backlog", exc)
            return None
        metrics.STATEMENT_DURATION.labels("tenant_backlog").observe(time.perf_counter() - started)
        self.tenant_gauges.publish(tenants.tenants, capped=tenants.tenants_capped, shard=self.shard)
        self.last_tenants = tenants
        return tenants

    def leave(self) -> None:
        self.leadership.elected(None)  # a leaving node leads no more
        try:
            self.store.remove_node(self.node_id)
        except StoreError as exc:
            log.warning(
                "could not delete the heartbeat of node %s (it is no longer live after %.0f s): %s",
                self.node_id,
                self.settings.liveness_window_ms / 1000,
                exc,
                extra={"event": "database_error"},
            )
            return
        log.info("node %s left the live nodes", self.node_id, extra={"event": "node_left"})

    def prune_tenants(self) -> None:
        try:
            pruned = self.store.prune_tenants(TENANT_PRUNE_LIMIT)
        except StoreError as exc:
            self._failed("prune_tenants", exc)
            return
        if pruned:
            log.info(
                "forgot %d tenants with no waiting message",
                pruned,
                extra={"event": "tenants_pruned", "count": pruned},
            )

    def expire_nodes(self) -> None:
        try:
            expired = self.store.expire_nodes(NODE_RETENTION_S)
        except StoreError as exc:
            self._failed("expire_nodes", exc)
            return
        if expired:
            log.info(
                "forgot %d nodes silent for over %.0f s",
                expired,
                NODE_RETENTION_S,
                extra={"event": "nodes_expired"},
            )

    def _failed(self, operation: str, exc: StoreError) -> None:
        metrics.DATABASE_ERRORS.labels(operation).inc()
        if exc.outage:  # logged once per outage by the store
            log.debug("%s failed: %s", operation, exc)
            return
        now = time.monotonic()
        if now - self._warned_at.get(operation, -_WARN_EVERY_S) >= _WARN_EVERY_S:
            self._warned_at[operation] = now
            log.warning(
                "%s failed: %s",
                operation,
                exc,
                extra={"event": "database_error", "operation": operation},
            )


# Each shard's backlog as its lane last published it (docs/shards.md): the gauges show them
# summed (the oldest overdue: the oldest of them). One shard: its own.
_BACKLOGS: dict[int, Backlog] = {}
_BACKLOGS_LOCK = threading.Lock()


def clear_backlog(shard: int = 0) -> None:
    """A node that is not the leader (of ``shard``) reports no backlog for it (``max()`` over
    nodes is right: the leader of every shard is the same live node, the lowest id)."""
    with _BACKLOGS_LOCK:
        _BACKLOGS.pop(shard, None)
        _set_gauges(list(_BACKLOGS.values()))


def publish_backlog(backlog: Backlog, shard: int = 0) -> None:
    with _BACKLOGS_LOCK:
        _BACKLOGS[shard] = backlog
        _set_gauges(list(_BACKLOGS.values()))
    metrics.BACKLOG_UPDATED.set(time.time())


def _set_gauges(parts: list[Backlog]) -> None:
    metrics.WAITING.set(sum(b.waiting for b in parts))
    metrics.CLAIMED.set(sum(b.claimed for b in parts))
    metrics.PARKED.set(sum(b.parked for b in parts))
    metrics.OVERDUE.set(sum(b.overdue for b in parts))
    metrics.OLDEST_OVERDUE.set(max((b.oldest_overdue_seconds for b in parts), default=0))
    metrics.BACKLOG_EXACT.set(1 if parts and all(b.unclaimed_exact for b in parts) else 0)
