"""The store contract of failure detection and leadership: stuck claims, resets that touch only
what they observed, the election and the takeover of a dead node's claims."""

from __future__ import annotations

import uuid
from datetime import timedelta

from chronos.store import StuckRow
from tests.support.store_contract.common import HORIZON, Harness, claimed, msg, node


class RecoveryContract:
    """Subclasses provide a ``harness`` fixture."""

    # -------------------------------------------------------------------- failure detection

    def test_a_node_never_finds_its_own_claims_stuck(self, harness: Harness) -> None:
        store = harness.store
        me, dead = node(), node()
        store.enqueue(
            [msg(f"o{i}", harness.now() + timedelta(milliseconds=500)) for i in range(3)], 0
        )
        before_start = store.claim(me, HORIZON, 1, 5)  # an earlier process with the same id
        harness.advance(50)
        since = store.register_node(me, 10.0, hostname="h", version="v")
        mine = store.claim(me, HORIZON, 1, 5)
        theirs = store.claim(dead, HORIZON, 1, 5)
        harness.advance(300)
        assert {s.id for s in store.find_stuck(200, 10)} == {
            r.id for r in before_start + mine + theirs
        }
        own = {s.id for s in store.find_stuck(200, 10, (me, since))}
        assert own == {r.id for r in before_start + theirs}
        assert {s.id for s in store.find_stuck(200, 10, (me, None))} == {r.id for r in theirs}

    def test_a_claim_exactly_the_hold_time_old_is_not_stuck(self, harness: Harness) -> None:
        """The sweep's comparison is strict: a claim as old as the hold time is still its owner's;
        any older and it is stuck. (Hold time 0: the one age a frozen database clock can put a
        claim at exactly.)"""
        store, dead = harness.store, node()
        with harness.frozen() as now:
            store.enqueue([msg("h", now + timedelta(milliseconds=100))], 0)
            (row,) = store.claim(dead, HORIZON, 1, 5)
            assert row.readied_at == now
            assert store.find_stuck(0, 10) == []
        harness.advance(1)
        assert [s.id for s in store.find_stuck(0, 10)] == ["h"]
        assert store.find_stuck(60_000, 10) == []

    def test_only_claims_older_than_the_hold_time_are_stuck(self, harness: Harness) -> None:
        store = harness.store
        dead = node()
        store.enqueue(
            [msg(f"s{i}", harness.now() + timedelta(milliseconds=500)) for i in range(3)], 0
        )
        store.enqueue([msg("unclaimed", harness.now() + timedelta(minutes=10))], 0)
        first = store.claim(dead, HORIZON, 2, 5)
        harness.advance(300)
        second = store.claim(dead, HORIZON, 1, 5)
        assert store.find_stuck(5_000, 10) == []
        stuck = store.find_stuck(200, 10)
        assert [s.id for s in stuck] == [r.id for r in first]  # oldest claims first
        assert all(s.readied_by == dead for s in stuck)
        assert [s.readied_at for s in stuck] == [r.readied_at for r in first]
        assert len(store.find_stuck(200, 1)) == 1
        harness.advance(300)
        assert {s.id for s in store.find_stuck(200, 10)} == {r.id for r in first + second}

    def test_reset_only_touches_the_claim_it_observed(self, harness: Harness) -> None:
        store = harness.store
        dead, peer = node(), node()
        store.enqueue([msg(i, harness.now() + timedelta(milliseconds=500)) for i in "xy"], 0)
        store.claim(dead, HORIZON, 10, 5)
        harness.advance(300)
        stuck = store.find_stuck(200, 10)
        assert {s.id for s in stuck} == {"x", "y"}
        # Meanwhile another detector reset "x" and a peer claimed it again.
        x = next(s for s in stuck if s.id == "x")
        assert store.reset_stuck([x]) == [("x", dead)]
        assert [r.id for r in store.claim(peer, HORIZON, 1, 5)] == ["x"]
        # The first detector's reset now only touches "y": "x" belongs to the peer.
        assert store.reset_stuck(stuck) == [("y", dead)]
        x_now = store.get_message("x")
        assert x_now is not None
        assert x_now.readied_by == peer
        assert store.reset_stuck([]) == []
        ghost = StuckRow("ghost", dead, stuck[0].readied_at)
        assert store.reset_stuck([ghost]) == []

    # -------------------------------------------------------------------- leadership

    def test_the_leader_is_the_lowest_node_with_a_heartbeat_younger_than_the_window(
        self, harness: Harness
    ) -> None:
        store = harness.store
        low, high = (str(u) for u in sorted(uuid.UUID(node()) for _ in range(2)))
        assert store.elect_leader(800) is None
        store.heartbeat(high)
        assert store.elect_leader(800) == high
        store.heartbeat(low)
        assert store.elect_leader(800) == low
        harness.advance(500)
        store.heartbeat(high)
        assert store.elect_leader(800) == low  # low's heartbeat lapsed by window - 300 ms
        harness.advance(500)
        assert store.elect_leader(800) == high  # by window + 200 ms: dead
        harness.advance(500)
        assert store.elect_leader(800) is None

    def test_a_heartbeat_carries_the_nodes_fire_rate(self, harness: Harness) -> None:
        """Each node writes its own fire rate with its heartbeat: the cluster's rate is the sum
        over the live nodes (GET /admin/v1/nodes); a beat without one keeps none."""
        store = harness.store
        fast, quiet = node(), node()
        store.heartbeat(fast, fired_per_second=120.5)
        store.heartbeat(quiet)
        rates = {n.node_id: n.fired_per_second for n in store.list_nodes(10.0)}
        assert rates == {fast: 120.5, quiet: None}
        store.heartbeat(fast, fired_per_second=0.0)
        store.heartbeat(quiet, fired_per_second=3.25)
        rates = {n.node_id: n.fired_per_second for n in store.list_nodes(10.0)}
        assert rates == {fast: 0.0, quiet: 3.25}

    def test_peers_delivering_are_other_nodes_that_had_a_record_delivered_lately(
        self, harness: Harness
    ) -> None:
        """A node whose deliveries stall asks whether its peers deliver: other nodes (never
        itself) whose heartbeat said they had a record delivered within the window (on the
        database clock: the beat's now() less how long ago the node said it was)."""
        store = harness.store
        me, firing, idle, silent = node(), node(), node(), node()
        store.heartbeat(me, fired_ago_s=0.0)
        store.heartbeat(idle)  # nothing delivered yet
        store.heartbeat(silent, fired_per_second=5.0)  # a release that does not say when
        assert store.peers_delivering(me, 1000) == 0
        store.heartbeat(firing, fired_ago_s=0.5)
        assert store.peers_delivering(me, 1000) == 1
        assert store.peers_delivering(me, 400) == 0  # delivered 0.5 s ago: not within 0.4 s
        assert store.peers_delivering(firing, 1000) == 1  # me, not itself
        harness.advance(600)
        assert store.peers_delivering(me, 1000) == 0  # 1.1 s ago now
        store.heartbeat(firing, fired_ago_s=0.2)  # beating, delivering again
        assert store.peers_delivering(me, 1000) == 1
        store.heartbeat(firing, fired_ago_s=3.0)  # beating, its last delivery long ago
        assert store.peers_delivering(me, 1000) == 0

    def test_claims_of_a_node_whose_heartbeat_lapsed_are_taken_over(self, harness: Harness) -> None:
        store = harness.store
        dead, live, me, ghost = node(), node(), node(), node()
        due = harness.now() + timedelta(milliseconds=500)
        store.enqueue([msg(f"m{i}", due + timedelta(milliseconds=i)) for i in range(7)], 0)
        for n in (dead, live, me):
            store.heartbeat(n)
        first = store.claim(dead, HORIZON, 2, 5)  # oldest claims first
        store.claim(live, HORIZON, 1, 5)
        store.claim(me, HORIZON, 1, 5)
        store.claim(ghost, HORIZON, 1, 5)  # no heartbeat row: left to the hold time
        harness.advance(100)
        second = store.claim(dead, HORIZON, 2, 5)
        harness.advance(500)
        store.heartbeat(live)
        # dead's heartbeat lapsed by 600 ms: window - 200 ms, not dead yet.
        assert store.reset_lapsed_claims(800, me, 10) == []
        harness.advance(400)
        # By 1000 ms: window + 200 ms. Never the caller's own claims, never a live node's.
        taken = store.reset_lapsed_claims(800, me, 3)
        assert taken == [(r.id, dead) for r in first + second[:1]]
        assert store.reset_lapsed_claims(800, me, 10) == [(second[1].id, dead)]
        assert store.reset_lapsed_claims(800, me, 10) == []
        assert sorted(r.readied_by or "" for r in claimed(store)) == sorted([live, me, ghost])
        # A dead node's claim a peer re-claimed since belongs to the peer: left alone.
        assert [r.id for r in store.claim(live, HORIZON, 1, 5)] == [first[0].id]
        assert store.reset_lapsed_claims(800, me, 10) == []
