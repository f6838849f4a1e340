"""The monitor (chronos.cluster.monitor) on the in-memory store: heartbeats, the backlog gauges,
the leader's per-tenant overdue gauges, and database errors counted rather than raised."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

import chronos
from chronos.cluster.leadership import Leadership
from chronos.cluster.monitor import (
    FIRE_RATE_WINDOW_S,
    GAUGE_BUSY_SHARE,
    Monitor,
    clear_backlog,
    gauge_interval,
)
from chronos.protocol import ScheduledMessage
from tests.unit.admin.helpers import AdminHarness


def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


def test_the_monitor_beats_publishes_the_backlog_and_leaves() -> None:
    h = AdminHarness()
    h.seed(4)
    h.store.enqueue(
        [ScheduledMessage("late", h.clock.now() + timedelta(seconds=1), None, b"", [])], 0
    )
    h.clock.advance(61_000)  # "late" is now 60 s overdue
    monitor = Monitor(h.settings, h.store)
    assert monitor.beat()
    nodes = h.store.list_nodes(h.settings.liveness_window_ms / 1000)
    assert [n.node_id for n in nodes] == [h.settings.node_id]
    assert nodes[0].version == chronos.__version__
    result = monitor.refresh_backlog()
    assert result is not None
    assert sample("chronos_waiting_messages") == 5
    assert sample("chronos_overdue_messages") == 1
    assert sample("chronos_oldest_overdue_message_age_seconds") == pytest.approx(60)
    monitor.leave()
    assert h.store.list_nodes(h.settings.liveness_window_ms / 1000, include_dead=True) == []


def test_the_backlog_gauges_add_up_every_shards_and_forget_a_shard_it_no_longer_leads() -> None:
    """Several shards (docs/shards.md): each lane's monitor publishes its shard's backlog; the
    gauges show them summed, the oldest overdue the oldest of them."""
    shards = [AdminHarness(), AdminHarness()]
    for i, h in enumerate(shards):
        h.seed(2 + i)
        late = h.clock.now() + timedelta(seconds=1)
        h.store.enqueue([ScheduledMessage("late", late, None, b"", [])], 0)
        h.clock.advance(11_000 + 30_000 * i)  # 10 s and 40 s overdue
    monitors = [Monitor(h.settings, h.store, shard=i) for i, h in enumerate(shards)]
    for monitor in monitors:
        assert monitor.refresh_backlog() is not None
    assert sample("chronos_waiting_messages") == (2 + 1) + (3 + 1)
    assert sample("chronos_overdue_messages") == 2
    assert sample("chronos_oldest_overdue_message_age_seconds") == pytest.approx(40)
    clear_backlog(1)  # its lane is no longer shard 1's leader
    assert sample("chronos_waiting_messages") == 3
    assert sample("chronos_oldest_overdue_message_age_seconds") == pytest.approx(10)
    clear_backlog(0)
    assert sample("chronos_waiting_messages") == 0


def test_slow_gauge_rounds_space_out_within_half_a_minute() -> None:
    assert gauge_interval(5.0, 0.1) == 5.0  # cheap: every 5 s
    assert gauge_interval(5.0, 0.75) == pytest.approx(15.0)  # 5 % of the time
    assert gauge_interval(5.0, 10.0) == 30.0  # never staler than half a minute
    assert gauge_interval(60.0, 0.1) == 60.0  # a longer interval asked for is kept
    assert gauge_interval(0.0, 0.1) == 0.0  # and a shorter one, while the rounds are quick


def test_the_leader_spaces_out_a_slow_gauge_round(monkeypatch: pytest.MonkeyPatch) -> None:
    h = AdminHarness()
    monitor = Monitor(h.settings, h.store)
    monkeypatch.setattr(monitor, "refresh_backlog", lambda: time.sleep(0.3))
    monitor.tick(1000.0)  # the only node: the leader, its first round at once
    assert monitor.leadership.is_leader()
    assert monitor._next_maintenance >= 1000.0 + 0.3 / GAUGE_BUSY_SHARE


def test_the_monitor_survives_database_errors_and_counts_them() -> None:
    h = AdminHarness()
    monitor = Monitor(h.settings, h.store)
    before = sample("chronos_database_errors_total", {"operation": "heartbeat"}) or 0
    h.store.fail_next(1, "heartbeat")
    assert not monitor.beat()
    h.store.fail_next(1, "backlog")
    assert monitor.refresh_backlog() is None
    assert sample("chronos_database_errors_total", {"operation": "heartbeat"}) == before + 1
    assert monitor.beat()


def test_stopping_a_monitor_that_never_started_touches_nothing() -> None:
    h = AdminHarness()
    Monitor(h.settings, h.store).stop()
    assert h.store.statements == []


# ------------------------------------------------------------------------------ tenants


def test_the_leader_publishes_the_top_tenants_overdue_and_drops_the_others() -> None:
    h = AdminHarness(tenant_metrics_top=2)
    h.seed_tenants()
    monitor = Monitor(h.settings, h.store)
    result = monitor.refresh_tenants()
    assert result is not None and [t.tenant for t in result.tenants] == ["gflood", "gsmall"]
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gflood"}) == 2
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gsmall"}) == 1
    assert sample("chronos_tenant_oldest_overdue_message_age_seconds", {"tenant": "gsmall"}) == (
        pytest.approx(30)
    )
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gquiet"}) is None
    )
    h.store.cancel_message("s1")  # gsmall is no longer overdue: its series goes
    monitor.refresh_tenants()
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gsmall"}) is None
    )
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gflood"}) == 2
    monitor.tenant_gauges.clear()  # as when the node stops leading
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gflood"}) is None
    )


def test_every_shards_leader_adds_its_tenants_to_the_gauges() -> None:
    """Two shards, their monitors sharing the node's gauges: a tenant's overdue rows are added
    up, its oldest is the oldest of both; a shard whose leadership is lost takes its part."""
    from chronos.observability.tenants import TenantGauges

    gauges = TenantGauges(2)
    shards = [AdminHarness(tenant_metrics_top=2), AdminHarness(tenant_metrics_top=2)]
    for h in shards:
        h.seed_tenants()  # gflood 2 overdue, gsmall 1 in each shard
    shards[1].clock.advance(30_000)  # shard 1's overdue rows are 30 s older
    monitors = [
        Monitor(h.settings, h.store, shard=i, tenant_gauges=gauges) for i, h in enumerate(shards)
    ]
    for monitor in monitors:
        assert monitor.refresh_tenants() is not None
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gflood"}) == 4
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gsmall"}) == 2
    assert sample("chronos_tenant_oldest_overdue_message_age_seconds", {"tenant": "gsmall"}) == (
        pytest.approx(60)
    )
    gauges.clear(1)  # shard 1's leadership lost
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gflood"}) == 2
    assert sample("chronos_tenant_overdue_messages", {"tenant": "gsmall"}) == 1
    gauges.clear()
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gflood"}) is None
    )


def test_a_failed_tenant_refresh_is_counted_not_raised() -> None:
    h = AdminHarness()
    h.store.fail_next(1, "tenant_backlog")
    before = sample("chronos_database_errors_total", {"operation": "tenant_backlog"}) or 0
    assert Monitor(h.settings, h.store).refresh_tenants() is None
    assert sample("chronos_database_errors_total", {"operation": "tenant_backlog"}) == before + 1


def test_the_leader_prunes_tenants_with_nothing_waiting_once_a_minute() -> None:
    from chronos.cluster import monitor as monitor_module

    h = AdminHarness()
    later = h.clock.now() + timedelta(hours=1)
    h.store.enqueue([ScheduledMessage("s", later, None, b"", [], tenant="stale")], 0)
    h.store.cancel_message("s")
    monitor = Monitor(h.settings, h.store)
    monitor.tick(1000.0)  # this node is the only one: it leads
    assert not h.store.several_tenants()  # "stale" forgotten on the first round
    h.store.enqueue([ScheduledMessage("t", later, None, b"", [], tenant="again")], 0)
    h.store.cancel_message("t")
    monitor.tick(1000.0 + monitor_module.TENANT_PRUNE_INTERVAL_S - 1)
    assert h.store.several_tenants()  # not yet a minute later
    monitor.tick(1000.0 + monitor_module.TENANT_PRUNE_INTERVAL_S)
    assert not h.store.several_tenants()


def test_a_capped_tenant_walk_is_visible_in_a_gauge() -> None:
    """More tenants with waiting rows than the statement looks at: the per-tenant gauges may miss
    a busy tenant, and chronos_tenant_backlog_capped says so."""
    h = AdminHarness()
    monitor = Monitor(h.settings, h.store)
    later = h.clock.now() + timedelta(hours=1)
    h.store.enqueue([ScheduledMessage("few", later, None, b"", [], tenant="a")], 0)
    assert monitor.refresh_tenants() is not None
    assert sample("chronos_tenant_backlog_capped") == 0
    many = [
        ScheduledMessage(f"m{i}", later, None, b"", [], tenant=f"t{i:05d}") for i in range(1_001)
    ]
    h.store.enqueue(many, 0)
    result = monitor.refresh_tenants()
    assert result is not None and result.tenants_capped
    assert sample("chronos_tenant_backlog_capped") == 1
    monitor.tenant_gauges.clear()  # as when the node stops leading
    assert sample("chronos_tenant_backlog_capped") == 0


def test_the_heartbeat_carries_the_nodes_fire_rate() -> None:
    h = AdminHarness()
    clock = [100.0]
    fired = [0.0]
    leadership = Leadership(
        h.settings.node_id, h.settings.liveness_window_ms, monotonic=lambda: clock[0]
    )
    monitor = Monitor(h.settings, h.store, leadership, fired=lambda: fired[0])

    def rate() -> float | None:
        (only,) = h.store.list_nodes(h.settings.liveness_window_ms / 1000)
        return only.fired_per_second

    assert monitor.beat() and rate() is None  # nothing to compare with yet
    clock[0] += 2.0
    fired[0] += 50
    assert monitor.beat() and rate() == pytest.approx(25.0)
    clock[0] += 3.0
    assert monitor.beat() and rate() == pytest.approx(10.0)  # 50 over the 5 s so far
    clock[0] += FIRE_RATE_WINDOW_S
    assert monitor.beat() and rate() == 0.0  # nothing fired over the last window
