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
gives back what it holds; it is never the leader. A lease renewed only after it had ended (the
process paused past it, say) does not restore the right to fire by itself: the peers may have
taken the node's claims over meanwhile, and the timers it still holds are theirs now. It fires
again once its firing loop has given back everything it held (``given_back``): otherwise the
heartbeat renewed on resume could reach the lease before the firing loop saw it end, and the
stale timers would fire beside the peers' copies.

A stall of the database is not a peer's death. When every node's statements hang together (a
commit stall: an fsync that takes seconds, a synchronous standby gone), every heartbeat and every
delete waits as long; when the database resumes, heartbeats look lapsed and claims look stuck
although their nodes are alive and about to renew and delete. So each node also records the
stalls it saw itself: its heartbeat held up longer than ``STALL_S``, and any statement of its
own (the heartbeat, the failure detector's) that failed, from when it was sent until one
succeeded again. The leader
lengthens the liveness window and the hold time it judges by the time the database was stalled
within them (``stalled_within``): after a stall, peers get a whole window of fresh heartbeats and
a whole hold time to finish their claims before any is taken over.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

from chronos.observability import metrics

log = logging.getLogger(__name__)

FENCE_MARGIN_S = 1.0  # the lease ends this long before peers may declare the node dead
STALL_S = 1.0
"""A statement of this node that takes longer than this (a heartbeat takes milliseconds) shows the
database stalled: every peer's statements may have waited as long."""
STALLS_KEPT = 256  # the most recent stalls remembered (overlapping ones are merged)


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
        self._lapsed = False  # the lease ended and what was held is not given back yet
        self._leader = False
        self._stalls: deque[tuple[float, float]] = deque(maxlen=STALLS_KEPT)  # (from, to), sorted
        self._failing_since: float | None = None  # a statement failed and none succeeded since

    # -- the lease ----------------------------------------------------------------------------

    def renew(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` (monotonic, taken *before* the statement) succeeded."""
        self.answered(sent_at)
        now = self.monotonic()
        with self._lock:
            if self._lease_until != float("-inf") and now >= self._lease_until:
                self._lapsed = True  # renewed after it ended: see the module's docstring
            self._lease_until = max(self._lease_until, sent_at + self.window_s - self.margin_s)

    def lease_until(self) -> float:
        with self._lock:
            return self._lease_until

    def holds_lease(self, now: float | None = None) -> bool:
        """Whether this node's lease runs (it may lead), whether or not it may fire yet."""
        at = self.monotonic() if now is None else now
        return at < self.lease_until()

    def may_fire(self, now: float | None = None) -> bool:
        """Whether this node may claim and fire: its lease has not ended, and if it ended once,
        the firing loop has given back what it held since."""
        at = self.monotonic() if now is None else now
        with self._lock:
            return at < self._lease_until and not self._lapsed

    def given_back(self) -> None:
        """The firing loop gave back everything it held after the lease ended: it may fire again
        (as long as the lease runs)."""
        with self._lock:
            self._lapsed = False

    # -- stalls of the database, as this node saw them ----------------------------------------

    def answered(self, sent_at: float, *, timed: bool = True) -> None:
        """A statement of this node sent at ``sent_at`` (monotonic) succeeded just now. It ends a
        stall: one of its statements failed since, or (``timed``: a statement that takes
        milliseconds, as the heartbeat, not a batch) this one took longer than ``STALL_S``."""
        now = self.monotonic()
        with self._lock:
            began, self._failing_since = self._failing_since, None
            if began is None and timed and now - sent_at > STALL_S:
                began = sent_at
            if began is not None:
                self._stalled(began, now)

    def unanswered(self, sent_at: float) -> None:
        """A statement of this node sent at ``sent_at`` failed: the database is out of its reach
        (stalled, as far as it can tell) from then until a statement succeeds."""
        with self._lock:
            if self._failing_since is None or sent_at < self._failing_since:
                self._failing_since = sent_at

    def _stalled(self, began: float, ended: float) -> None:
        stalls = self._stalls
        while stalls and stalls[-1][1] >= began:  # merge the stalls this one overlaps
            first, last = stalls.pop()
            began, ended = min(began, first), max(ended, last)
        stalls.append((began, ended))

    def stalled_within(self, span_s: float, now: float | None = None) -> float:
        """How long the database was stalled, as this node saw it, over the last ``span_s``
        seconds of time it was not: going back from now until ``span_s`` seconds without a
        stall are behind, the stalled seconds passed on the way (0 without a stall). A peer that
        had ``span_s`` to do something (renew its heartbeat, finish a claim) had this much
        longer, and may have needed it."""
        at = self.monotonic() if now is None else now
        with self._lock:
            stalls = list(self._stalls)
            if self._failing_since is not None:  # stalled now, for as long as it failed
                began = self._failing_since
                while stalls and stalls[-1][1] >= began:
                    began = min(began, stalls.pop()[0])
                stalls.append((began, at))
        stalled, cursor, left = 0.0, at, span_s
        for began, ended in reversed(stalls):
            ended = min(ended, cursor)
            if ended <= began:
                continue
            if cursor - ended >= left:
                break
            left -= cursor - ended
            stalled += ended - began
            cursor = began
        return stalled

    # -- the election -------------------------------------------------------------------------

    def elected(self, leader: str | None) -> bool:
        """Record the outcome of an election (the lowest live node id, or None if unknown)."""
        leads = leader == self.node_id and self.holds_lease()
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
        return leader and self.holds_lease()


def lowest_id(node_ids: list[str]) -> str | None:
    """The lowest node id in uuid order (Postgres orders uuids the same way), or None."""
    return str(min(uuid.UUID(n) for n in node_ids)) if node_ids else None
