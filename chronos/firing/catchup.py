"""The paced catch-up (``CHRONOS_CATCHUP_RATE``): this node's share of the cluster-wide rate at
which messages overdue by more than ``CHRONOS_CATCHUP_AFTER_MS`` fire, as a token bucket spent by
its claims (no round trip per message: the tokens are the claim's limit for overdue rows).

The share is the rate divided by the live nodes of the heartbeat table (read every
``LIVE_NODES_INTERVAL_S``): a cluster of N nodes fires its overdue backlog at the rate whatever N.
With several shards (docs/shards.md) each node fires each shard's on a lane of its own: the rate
is divided by the shards too, so it is never exceeded (a backlog in fewer shards than all fires
at their part of it).
The bucket holds at most ``BURST_S`` seconds of tokens (one at least: a share below four a
second still fires), so the rate holds over any window longer than that; the rows coming due
now are claimed as before, never waiting for a token.
"""

from __future__ import annotations

import logging

from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.store import Catchup, ClaimedRow, Store

log = logging.getLogger(__name__)

LIVE_NODES_INTERVAL_S = 1.0
BURST_S = 0.25  # tokens the bucket holds at most, in seconds of this node's share


class CatchupPacer:
    def __init__(self, settings: Settings, store: Store, shards: int = 1) -> None:
        self.rate = settings.catchup_rate
        self.shards = max(1, shards)
        self.after_ms = settings.catchup_after_ms
        self.live_window_s = settings.liveness_window_ms / 1000
        self.store = store
        self.live_nodes = 1
        self.counted_at: float | None = None
        self.tokens = 0.0
        self.filled_at: float | None = None

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def share(self) -> float:
        """This node's rate on this shard's lane (messages per second)."""
        return self.rate / (max(1, self.live_nodes) * self.shards)

    def live(self, now: float) -> int:
        """How many share a cluster-wide rate: the live nodes (read at most every
        ``LIVE_NODES_INTERVAL_S``), times the shards (a lane each on every node)."""
        if self.counted_at is None or now - self.counted_at >= LIVE_NODES_INTERVAL_S:
            self._count_live_nodes(now)
        return self.live_nodes * self.shards

    def budget(self, now: float, limit: int) -> Catchup | None:
        """The catch-up part of a claim at ``now`` (monotonic): None when off."""
        if not self.enabled:
            return None
        self.live(now)
        share = self.share()
        if self.filled_at is not None:
            # At least one token: a share under 1 / BURST_S a second still fires (slowly).
            cap = max(1.0, share * BURST_S)
            self.tokens = min(cap, self.tokens + share * (now - self.filled_at))
        self.filled_at = now
        return Catchup(self.after_ms, max(0, min(limit, int(self.tokens))))

    def spent(self, rows: list[ClaimedRow]) -> None:
        """Take the tokens of the overdue rows a claim returned."""
        if self.enabled:
            self.tokens -= sum(1 for r in rows if r.remaining_ms < -self.after_ms)

    def _count_live_nodes(self, now: float) -> None:
        try:
            nodes = self.store.list_nodes(self.live_window_s)
        except StoreError as exc:  # keep the last count: the claim reports the outage
            log.debug("could not count the live nodes: %s", exc)
            return
        self.counted_at = now
        self.live_nodes = max(1, sum(1 for n in nodes if n.live))
