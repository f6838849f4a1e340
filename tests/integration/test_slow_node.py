"""A node must never suspect itself while merely slow, on real Postgres.

The node claims rows, produces some (in flight: no delivery report yet) and holds others in its
timers; then one of its statements is slow, past the hold time. Its own failure detector must
not reset any of them (they would fire twice); the timers held past the hold time are given back
by the firing loop itself and fire once; the in-flight rows are deleted when delivered. A dead
peer's claims are still reset.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest

from chronos.cluster.recovery import RecoveryLoop
from chronos.firing.loop import FiringLoop
from chronos.store import PostgresStore
from chronos.testing import FakePublisher, unfenced
from tests.support import Topics, make_settings
from tests.support.store_contract import msg

pytestmark = pytest.mark.integration

HOLD_MS = 1500


def test_a_slow_node_keeps_its_in_flight_rows_and_gives_back_its_expired_ones(
    migrated_database_url: str,
) -> None:
    node_id = str(uuid.uuid4())
    settings = make_settings(
        migrated_database_url,
        "127.0.0.1:1",
        Topics("in", "out", "dlq"),
        node_id=node_id,
        hold_time_ms=HOLD_MS,
        lookahead_ms=600,
        delivery_timeout_ms=500,
        poll_interval_ms=100,
    )
    store = PostgresStore(migrated_database_url)
    publisher = FakePublisher(auto=False)
    try:
        since = store.register_node(node_id, 10.0, hostname="h", version="v")
        assert since is not None
        now = store.ping()
        store.enqueue([msg(f"soon{i}", now + timedelta(milliseconds=200)) for i in range(5)], 0)
        store.enqueue([msg(f"late{i}", now + timedelta(milliseconds=600)) for i in range(5)], 0)
        store.enqueue([msg("peer", now + timedelta(milliseconds=150))], 0)
        dead_peer = str(uuid.uuid4())
        assert [r.id for r in store.claim(dead_peer, 1_000, 1, 10)] == ["peer"]
        lease = unfenced(node_id)  # this test is about the hold time, not the heartbeat
        firing = FiringLoop(settings, store, publisher, lease, claims_since=since)
        recovery = RecoveryLoop(settings, store, lease, claims_since=since)
        # As the loop's step does first: what is paused is known (it claims nothing before).
        firing.pauses.refresh(time.monotonic())
        firing.claim(time.monotonic())  # claims soon* and late* (within the lookahead)
        assert firing.dispatcher.held() == 10
        time.sleep(0.25)
        firing.dispatcher.fire_due()  # soon* produced: in flight, no report yet
        assert len(publisher.pending()) == 5
        # Then this node is slow (a long statement): past the hold time for every claim.
        time.sleep(HOLD_MS / 1000 + 0.1)
        reset = recovery.sweep()
        assert reset == 1  # the dead peer's row only
        claimed = store.list_messages(state="claimed", park_attempts=10, limit=20)
        assert sorted(m.id for m in claimed) == sorted(
            [f"soon{i}" for i in range(5)] + [f"late{i}" for i in range(5)]
        )
        # The timers held past the hold time are not fired but given back by the node.
        firing.dispatcher.fire_due()
        firing.finish(force=True)
        assert len(publisher.records) == 5
        waiting = store.list_messages(state="waiting", park_attempts=10, limit=20)
        assert sorted(m.id for m in waiting) == sorted(["peer"] + [f"late{i}" for i in range(5)])
        # The in-flight rows are delivered, then deleted: each fired once.
        publisher.deliver()
        publisher.poll(0)
        firing.finish(force=True)
        assert all(store.get_message(f"soon{i}") is None for i in range(5))
        # The given-back rows fire once, on the next claim.
        firing.claim(time.monotonic())
        firing.dispatcher.fire_due()
        assert len(publisher.records) == 11  # 5 soon + 5 late + the peer's: none twice
    finally:
        store.close()
