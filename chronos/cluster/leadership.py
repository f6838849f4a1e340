"""Leadership (the lowest live node id, on the heartbeat table) and this node's right to fire.

Every node writes its heartbeat row (``chronos_nodes``) every second. A node is *live* while its
heartbeat is younger than the liveness window (``liveness_window_ms``, judged on the database
clock); the *leader* is the lowest live node id. Every node works the election out for itself
from the table after each heartbeat (and, while it does not lead, its recovery loop on its own
cadence, so a dead leader is replaced within a detection interval of its heartbeat lapsing), so
there is no vote and no message: zero or two leaders for
a moment (a heartbeat late by a hair, a node starting) are harmless because everything the leader
does is a compare-and-set. The leader alone runs the periodic maintenance: the failure-detection
sweep (claims of nodes whose heartbeat lapsed, then claims older than the hold time), the backlog
statistics and the expiry of long-gone node rows.

Unlike the seed's ``cleanOld`` (which keeps the *stale* entries), a node counts only heartbeats
*younger* than the window.

The fence: the leader takes over the claims of a node whose heartbeat is older than the window,
without waiting for the hold time. A node that cannot write its heartbeat must therefore stop
firing before its peers may call it dead. Its *lease* ends ``window - FENCE_MARGIN_S`` after it
*sent* its last successful heartbeat, on its own monotonic clock. The row's ``heartbeat_at`` is
the database's ``now()`` of that statement, which is never earlier than the moment it was sent,
so the lease ends at least ``FENCE_MARGIN_S`` before the leader can see the heartbeat lapsed,
however long the statement itself took. Past its lease a node fires nothing, claims nothing and
gives back what it holds; it is never the leader.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from chronos.observability import metrics

log = logging.getLogger(__name__)

FENCE_MARGIN_S = 1.0  # the lease ends this long before peers may declare the node dead


class Leadership:
    """This node's lease (renewed by each successful heartbeat) and whether it leads.

    Written by the monitor thread (``renew``, ``elected``), read by the loops.
    """

    def __init__(
        self,
        node_id: str,
        window_ms: int,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        margin_s: float = FENCE_MARGIN_S,
    ):
        self.node_id = node_id
        self.window_s = window_ms / 1000
        self.margin_s = margin_s
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._lease_until = float("-inf")  # monotonic; nothing may fire before the first beat
        self._leader = False

    # -- the lease ----------------------------------------------------------------------------

    def renew(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (monotonic, taken *before* the statement) succeeded."""
        with self._lock:
            self._lease_until = max(self._lease_until, sent_at + self.window_s - self.margin_s)

    def lease_until(self) -> float:
        with self._lock:
            return self._lease_until

    def may_fire(self, now: float | None = None) -> bool:
        """Whether this node may claim and fire: its lease has not ended."""
        at = self.monotonic() if now is None else now
        return at < self.lease_until()

    # -- the election -------------------------------------------------------------------------

    def elected(self, leader: str | None) -> bool:
        """Record the outcome of an election (the lowest live node id, or None if unknown)."""
        leads = leader == self.node_id and self.may_fire()
        with self._lock:
            changed, self._leader = leads != self._leader, leads
        metrics.LEADER.set(1 if leads else 0)
        if changed:
            if leads:
                log.info(
                    "node %s is the leader: it runs the periodic maintenance",
                    self.node_id,
                    extra={"event": "leader_elected", "node": self.node_id},
                )
            else:
                log.info(
                    "node %s is no longer the leader (leader: %s)",
                    self.node_id,
                    leader,
                    extra={"event": "leadership_lost", "node": self.node_id, "leader": leader},
                )
        return leads

    def is_leader(self) -> bool:
        """Whether this node leads now (its lease has not ended since it was elected)."""
        with self._lock:
            leader = self._leader
        return leader and self.may_fire()


def lowest_id(node_ids: list[str]) -> str | None:
    """The lowest node id in uuid order (Postgres orders uuids the same way), or None."""
    return str(min(uuid.UUID(n) for n in node_ids)) if node_ids else None
