"""Leadership: the election, the leader-only maintenance, the lease and the fence (manual clock).

The store side of the election and of the takeover is in the store contract (both stores).
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from chronos.cluster.leadership import FENCE_MARGIN_S, Leadership
from chronos.cluster.monitor import Monitor
from chronos.cluster.recovery import RecoveryLoop
from chronos.errors import ConfigError
from chronos.testing import InMemoryStore, ManualClock
from tests.support.store_contract import msg
from tests.unit.helpers import Firing, settings

WINDOW = 5000


def ids(count: int) -> list[str]:
    return [str(u) for u in sorted(uuid.uuid4() for _ in range(count))]


def leader_gauge() -> float | None:
    return REGISTRY.get_sample_value("chronos_leader")


class Cluster:
    """Nodes (a monitor and a recovery loop each) sharing one in-memory store and clock."""

    def __init__(self, count: int = 2, **overrides: object) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.store = InMemoryStore(self.clock)
        self.ids = ids(count)
        self.monitors: dict[str, Monitor] = {}
        self.recovery: dict[str, RecoveryLoop] = {}
        for node_id in self.ids:
            config = settings(node_id=node_id, liveness_window_ms=WINDOW, **overrides)
            lead = Leadership(node_id, WINDOW, monotonic=self.clock.monotonic)
            self.monitors[node_id] = Monitor(config, self.store, lead, backlog_interval=0.0)
            self.recovery[node_id] = RecoveryLoop(config, self.store, lead)

    def tick(self, *nodes: str) -> None:
        for node_id in nodes:
            self.monitors[node_id].tick(self.clock.monotonic())

    def leaders(self) -> list[str]:
        return [n for n, m in self.monitors.items() if m.leadership.is_leader()]


# ------------------------------------------------------------------------------- the election


def test_the_lowest_live_node_leads_and_alone_refreshes_the_backlog() -> None:
    c = Cluster(3)
    low, mid, high = c.ids
    c.tick(high, mid, low)
    c.tick(high, mid)  # the others learn that low is live
    assert c.leaders() == [low]
    c.store.statements.clear()
    c.tick(high)
    assert leader_gauge() == 0
    assert "backlog" not in c.store.statements and "expire_nodes" not in c.store.statements
    c.tick(low)
    assert leader_gauge() == 1
    assert c.store.statements.count("backlog") == 1
    assert c.store.statements.count("expire_nodes") == 1


def test_a_lapsed_leader_is_replaced_once_its_heartbeat_is_older_than_the_window() -> None:
    c = Cluster(2)
    low, high = c.ids
    c.tick(low, high)
    assert c.leaders() == [low]
    # low stops beating (killed); high keeps beating every second.
    for _ in range(WINDOW // 1000 - 1):
        c.clock.advance(1000)
        c.tick(high)
        assert not c.monitors[high].leadership.is_leader()
    c.clock.advance(999)  # low's heartbeat is window - 1 ms old: still live
    c.tick(high)
    assert not c.monitors[high].leadership.is_leader()
    c.clock.advance(2)  # window + 1 ms
    c.tick(high)
    assert c.monitors[high].leadership.is_leader()
    assert leader_gauge() == 1


def test_the_recovery_loop_replaces_a_lapsed_leader_without_waiting_for_a_heartbeat() -> None:
    c = Cluster(2, hold_time_ms=30_000)
    low, high = c.ids
    c.store.enqueue([msg("m", c.clock.now() + timedelta(hours=1))], 0)
    c.tick(low, high)
    c.store.claim(low, 4_000_000, 1, 10)
    c.clock.advance(WINDOW - 1000)
    c.tick(high)  # high's last election: low still live
    c.clock.advance(1001)  # low lapsed; no heartbeat of high since (its lease holds)
    assert not c.monitors[high].leadership.is_leader()
    assert c.recovery[high].run_once() == 1  # elected on its own cadence, then took over
    assert c.monitors[high].leadership.is_leader()
    assert c.store.claimed() == []


def test_a_node_that_cannot_beat_is_never_the_leader() -> None:
    c = Cluster(1)
    (only,) = c.ids
    c.tick(only)
    assert c.leaders() == [only]
    c.store.fail_next(1, "elect_leader")
    c.tick(only)
    assert c.leaders() == []  # unsure: not the leader
    c.tick(only)
    assert c.leaders() == [only]
    c.clock.advance(WINDOW - FENCE_MARGIN_S * 1000)  # no heartbeat since: the lease ended
    assert c.leaders() == []


def test_only_the_leader_sweeps() -> None:
    c = Cluster(2)
    low, high = c.ids
    dead = str(uuid.uuid4())
    c.store.enqueue([msg(f"m{i}", c.clock.now() + timedelta(hours=1)) for i in range(3)], 0)
    c.store.claim(dead, 4_000_000, 10, 10)
    c.clock.advance(25_000)  # past the hold time (20 s by default)
    c.tick(low, high)
    assert c.recovery[high].run_once() == 0
    assert len(c.store.claimed()) == 3
    assert c.recovery[low].run_once() == 3
    assert c.store.claimed() == []


def test_the_leader_takes_over_a_lapsed_node_before_the_hold_time() -> None:
    c = Cluster(2, hold_time_ms=30_000)
    low, high = c.ids
    c.store.enqueue([msg(f"m{i}", c.clock.now() + timedelta(hours=1)) for i in range(4)], 0)
    c.tick(low, high)
    c.store.claim(high, 4_000_000, 4, 10)
    c.clock.advance(WINDOW - 1)  # high's heartbeat: window - 1 ms old
    c.tick(low)
    assert c.recovery[low].run_once() == 0
    c.clock.advance(2)  # window + 1 ms, far below the hold time
    c.tick(low)
    assert c.recovery[low].run_once() == 4
    assert c.store.claimed() == []


def test_two_leaders_at_once_reset_each_row_exactly_once() -> None:
    c = Cluster(3, hold_time_ms=30_000)
    a, b, dead = c.ids
    c.store.enqueue([msg(f"m{i:03d}", c.clock.now() + timedelta(hours=1)) for i in range(50)], 0)
    c.tick(a, b, dead)
    c.store.claim(dead, 4_000_000, 50, 10)
    c.clock.advance(WINDOW + 1)
    c.tick(a, b)
    # Force two leaders: b believes itself the leader too (e.g. it has not seen a yet).
    c.monitors[b].leadership.elected(b)
    assert c.leaders() == [a, b]
    reset_a = c.store.reset_lapsed_claims(WINDOW, a, 20)
    assert c.recovery[b].run_once() == 30
    assert c.recovery[a].run_once() == 0
    assert len(reset_a) == 20
    assert c.store.claimed() == []
    assert len(c.store) == 50


# ------------------------------------------------------------------------------- the lease


class SlowHeartbeatStore(InMemoryStore):
    """A store whose heartbeat statement takes ``delay_ms`` before it reads ``now()``."""

    delay_ms = 700

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.manual = clock

    def heartbeat(
        self,
        node_id: str,
        *,
        started_at: datetime | None = None,
        hostname: str | None = None,
        version: str | None = None,
        fired_per_second: float | None = None,
        fired_ago_s: float | None = None,
    ) -> None:
        self.manual.advance(self.delay_ms)
        super().heartbeat(
            node_id,
            started_at=started_at,
            hostname=hostname,
            version=version,
            fired_per_second=fired_per_second,
            fired_ago_s=fired_ago_s,
        )


def test_the_node_stops_firing_before_its_peers_may_take_it_over() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    store = SlowHeartbeatStore(clock)
    me, peer = ids(2)
    lead = Leadership(me, WINDOW, monotonic=clock.monotonic)
    monitor = Monitor(settings(node_id=me), store, lead)
    sent = clock.monotonic()
    assert monitor.beat()
    store.enqueue([msg("m", clock.now() + timedelta(hours=1))], 0)
    store.claim(me, 4_000_000, 1, 10)
    # The lease counts from when the heartbeat was sent, not from when it returned.
    assert lead.lease_until() == pytest.approx(sent + WINDOW / 1000 - FENCE_MARGIN_S)
    lease_ends = sent + WINDOW / 1000 - FENCE_MARGIN_S
    clock.advance((lease_ends - clock.monotonic()) * 1000 - 1)
    assert lead.may_fire()
    clock.advance(1)
    assert not lead.may_fire()  # the node has stopped firing...
    assert store.reset_lapsed_claims(WINDOW, peer, 10) == []  # ...and no peer may take over yet
    # The heartbeat row says "sent + 700 ms": peers may take over only a window after that.
    clock.advance(FENCE_MARGIN_S * 1000 + SlowHeartbeatStore.delay_ms)
    assert store.reset_lapsed_claims(WINDOW, peer, 10) == []
    clock.advance(1)
    assert store.reset_lapsed_claims(WINDOW, peer, 10) == [("m", me)]


def test_past_its_lease_the_firing_loop_fires_nothing_and_gives_back_what_it_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    node_id = ids(1)[0]
    lead = Leadership(node_id, WINDOW, monotonic=clock.monotonic)
    f = Firing.create(clock=clock, leadership=lead, node_id=node_id)
    lead.renew(clock.monotonic())  # lease: 4 s from now
    lease_ms = WINDOW - FENCE_MARGIN_S * 1000
    for name, offset in (("early", -500), ("late", 500)):
        deadline = clock.now() + timedelta(milliseconds=lease_ms + offset)
        f.store.enqueue([msg(name, deadline, value=name.encode())], 0)
    f.run_for(lease_ms - 1)
    assert [r.value for r in f.publisher.delivered()] == [b"early"]
    assert [r.id for r in f.store.claimed()] == ["late"]  # claimed, its timer waits
    with caplog.at_level(logging.WARNING, logger="chronos.firing.loop"):
        f.tick(1)  # the lease ends
    assert f.store.claimed() == []  # given back
    assert f.loop.held_bytes == 0  # and out of the byte budget (it once kept them: a leak)
    events = {getattr(r, "event", None): r for r in caplog.records}
    assert {"lease_lapsed", "claim_expired"} <= set(events)
    assert events["claim_expired"].getMessage().startswith("1 claims expired before firing")
    f.run_for(2000)
    assert [r.value for r in f.publisher.delivered()] == [b"early"]  # "late" was not fired
    assert f.store.claimed() == []  # and not claimed again
    lead.renew(clock.monotonic())  # the heartbeat is back
    f.run_for(500)
    assert [r.value for r in f.publisher.delivered()] == [b"early", b"late"]


def test_a_lease_renewed_after_it_ended_fires_nothing_it_held_before_giving_it_back() -> None:
    """The process paused past its lease (and past the liveness window: a peer took its claims
    over), then resumed: the heartbeat thread renews the lease before the firing threads run.
    The timers held since are the peers' now; none fires, all are given back, and the node
    fires again only after that."""
    clock = ManualClock()
    node_id = ids(1)[0]
    lead = Leadership(node_id, WINDOW, monotonic=clock.monotonic)
    f = Firing.create(clock=clock, leadership=lead, node_id=node_id)
    lead.renew(clock.monotonic())
    f.store.enqueue([msg("m", clock.now() + timedelta(milliseconds=800))], 0)
    f.run_for(100)
    assert [r.id for r in f.store.claimed()] == ["m"]  # its timer waits in the dispatcher
    clock.advance(WINDOW + 2000)  # paused: no thread ran; the lease ended long ago
    lead.renew(clock.monotonic())  # on resume the heartbeat thread renews first
    assert lead.holds_lease() and not lead.may_fire()
    f.loop.dispatcher.fire_due()  # the dispatcher wakes before the loop: "m" is due
    assert f.publisher.produced() == []
    f.tick()  # the loop: gives back what it held, then may fire again
    assert f.publisher.produced() == []
    assert f.store.claimed() == []  # "m" is given back (here no peer took it: it is unclaimed)
    assert lead.may_fire()
    f.run_for(200)
    assert len(f.publisher.delivered()) == 1  # claimed again, fired once


def test_a_lease_renewed_in_time_is_no_lapse() -> None:
    clock = ManualClock()
    lead = Leadership(ids(1)[0], WINDOW, monotonic=clock.monotonic)
    assert not lead.may_fire()  # before the first heartbeat
    lead.renew(clock.monotonic())
    assert lead.may_fire()  # the first heartbeat is no renewal after a lapse
    clock.advance(WINDOW - FENCE_MARGIN_S * 1000 - 1)
    lead.renew(clock.monotonic())
    assert lead.may_fire()


def test_the_dispatcher_fires_no_timer_past_the_lease() -> None:
    clock = ManualClock()
    node_id = ids(1)[0]
    lead = Leadership(node_id, WINDOW, monotonic=clock.monotonic)
    f = Firing.create(clock=clock, leadership=lead, node_id=node_id)
    lead.renew(clock.monotonic())
    lease_ms = WINDOW - FENCE_MARGIN_S * 1000
    f.store.enqueue([msg("m", clock.now() + timedelta(milliseconds=lease_ms + 200))], 0)
    f.run_for(lease_ms - 1)  # claimed, timer set for after the lease
    clock.advance(300)  # the dispatcher wakes before the loop thread notices
    f.loop.dispatcher.fire_due()
    assert f.publisher.produced() == []


# ------------------------------------------------------------------------------- the setting


def test_the_liveness_window_is_validated_at_start_up() -> None:
    assert settings().liveness_window_ms == 5000
    assert settings(liveness_window_ms=3000).liveness_window_ms == 3000
    with pytest.raises(ConfigError, match="CHRONOS_LIVENESS_WINDOW_MS"):
        settings(liveness_window_ms=2999)
