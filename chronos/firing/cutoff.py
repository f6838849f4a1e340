"""Whether this node alone is cut off from Kafka while its peers still write to it.

A broker's death stalls every node's writes until the controller fences it (acks=all waits for
the in-sync set to shrink; Kafka's contract): the firing loop waits that out, its delivery
timeout outlasting a fencing, so each record is delivered once when writes flow again instead
of timing out, being claimed again and leaving a copy. A node cut off from the brokers alone
(its network, a proxy in between) stalls the same way while its peers deliver: waiting out the
delivery timeout there would hold its claims back from peers that could fire them.

So while its deliveries make no progress for ``CUT_OFF_AFTER_S``, the firing loop asks the
database, at most once every ``ASK_EVERY_S``, whether a peer had a record delivered since this
node's last delivery (each heartbeat says when its node last did: ``fired_at``). If one did,
this node is cut off: it replaces its producer (the records it holds fail, purged, and are given
back for its peers to fire; one that reached a broker before the cut may fire twice) and takes
its writes for failed, so it claims only probes (``WRITE_PROBE_ROWS``) until one is delivered.
If none did, the whole cluster's writes stall and it goes on waiting.
"""

from __future__ import annotations

import logging

from chronos.errors import StoreError
from chronos.firing.dispatcher import Dispatcher
from chronos.observability import metrics
from chronos.observability.dependencies import KAFKA_WRITES
from chronos.store import Store

log = logging.getLogger("chronos.firing.loop")  # one logger name for the firing loop

CUT_OFF_AFTER_S = 3.0
"""Seconds of deliveries without progress before a node asks whether its peers deliver: well
above a delivery's usual milliseconds, well below a broker's fencing (9 s by default)."""
ASK_EVERY_S = 1.0
HEARTBEAT_LAG_S = 1.5
"""How old a peer's word may be: heartbeats come every second, and a delivery is counted when
its report is served (the peer's ``fired_at`` trails its last delivery by up to this)."""


class CutOffWatch:
    """Asked by the firing loop at each step; True when it just found this node cut off."""

    def __init__(self, node_id: str, store: Store, dispatcher: Dispatcher) -> None:
        self.node_id = node_id
        self.store = store
        self.dispatcher = dispatcher
        self.next_ask_at = 0.0

    def check(self, now: float) -> bool:
        stalled = self.dispatcher.stalled_for(now)
        if stalled < CUT_OFF_AFTER_S or now < self.next_ask_at:
            return False
        self.next_ask_at = now + ASK_EVERY_S
        # Peers that delivered after this node's stall began (less a heartbeat's lag: a peer's
        # delivery just before the stall, reported late, is not one that proves it).
        within_ms = int((stalled - HEARTBEAT_LAG_S) * 1000)
        try:
            peers = self.store.peers_delivering(self.node_id, within_ms)
        except StoreError as exc:  # unknown: keep waiting, ask again
            log.log(exc.log_level, "could not ask whether peers deliver: %s", exc)
            return False
        if not peers:
            return False
        cause = (
            f"no record delivered for {stalled:.1f} s while {peers} peer(s) had theirs "
            "delivered: this node is cut off from Kafka, its claims go back to its peers"
        )
        log.warning(cause, extra={"event": "cut_off", "seconds": round(stalled, 1)})
        metrics.CUT_OFF.inc()
        KAFKA_WRITES.failed(cause)
        self.dispatcher.publisher.replace(cause)
        self.dispatcher.progress_at = now  # the replaced producer's records start afresh
        return True
