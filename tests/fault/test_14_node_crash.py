"""Scenario 14 — a node crashes (kill -9) at default settings: the survivor takes over in seconds.

Two ``chronos run`` processes at the default settings (only their HTTP ports apart), on the
embedded broker.

* **crash under load**: 500 messages per second, each due 4-12 s after it is sent; 8 s into the
  load one node (not the leader) is killed with SIGKILL, and the load goes on for 12 s more.
  Pass: lost 0, early 0, and no message fired later than 20 s after its deadline. Recorded: the
  input failover (kill -> the survivor holds every input partition), the claim takeover (kill ->
  the dead node holds no claim) and the worst lateness.
* **leader crash**: 100 messages per second (due 2-6 s later); the leader is killed with SIGKILL
  while it holds claims. Pass: the other node reports ``chronos_leader 1`` within the liveness
  window plus a second of the kill, and its sweeps run: it resets the dead leader's claims itself
  (``suspected_failure`` events, cause ``heartbeat_lapsed``), none is left, nothing is lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from chronos.config.settings import OPTIONS_BY_NAME
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import FAST_TIMINGS, Cluster, NodeProcess
from tests.support.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The production defaults of every timing the fault suite usually shortens (logs stay JSON).
DEFAULTS: dict[str, Any] = {
    name: OPTIONS_BY_NAME[name].default for name in FAST_TIMINGS if name != "log_format"
}
LATE_LIMIT_MS = 20_000


def leader_of(nodes: list[NodeProcess]) -> NodeProcess:
    """The node that reports ``chronos_leader 1`` (waits until exactly one does)."""
    found: list[NodeProcess] = []

    def one() -> bool:
        found[:] = [n for n in nodes if n.metric("chronos_leader") == 1]
        return len(found) == 1

    assert eventually(one, timeout=15, every=0.1), {
        n.name: n.metric("chronos_leader") for n in nodes
    }
    return found[0]


def test_kill_one_of_two_nodes_under_load(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster(**DEFAULTS)
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    window_s = nodes[0].settings.liveness_window_ms / 1000
    victim = next(n for n in nodes if n is not leader_of(nodes))
    survivor = next(n for n in nodes if n is not victim)
    load = Load(kafka_bootstrap, topics.input, rate=500, delay=(4.0, 12.0)).start()
    try:
        time.sleep(8)
        killed_at = time.monotonic()
        victim.kill()
        held_at_kill = cluster.table.claimed(victim.settings.node_id)
        wanted = {(topics.input, p) for p in range(topics.partitions)}
        done: dict[str, float] = {}  # when each recovery was first seen, after the kill
        conditions: dict[str, Callable[[], bool]] = {
            "failover": lambda: survivor.assignment() == wanted,
            "takeover": lambda: cluster.table.claimed(victim.settings.node_id) == 0,
        }
        while len(done) < len(conditions) and time.monotonic() - killed_at < 60:
            for name, holds in conditions.items():
                if name not in done and holds():
                    done[name] = time.monotonic() - killed_at
            time.sleep(0.05)
        assert set(done) == set(conditions), f"not recovered within 60 s: {done}"
        failover_s, takeover_s = done["failover"], done["takeover"]
        time.sleep(max(0.0, 12 - (time.monotonic() - killed_at)))
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=90, quiet=2.0)
    record_result(
        ScenarioResult.of(
            "14-node-crash",
            "kill -9 of one of two nodes at 500 msg/s, default settings",
            report,
            max(failover_s, takeover_s),
            input_failover_s=round(failover_s, 2),
            claim_takeover_s=round(takeover_s, 2),
            claims_held_at_kill=held_at_kill,
            liveness_window_s=window_s,
            late_max_ms=round(report.late.max),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.late.max <= LATE_LIMIT_MS, report.summary()
    assert survivor.alive()


def test_kill_the_leader(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster(**DEFAULTS)
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    window_s = nodes[0].settings.liveness_window_ms / 1000
    leader = leader_of(nodes)
    other = next(n for n in nodes if n is not leader)
    assert other.metric("chronos_leader") == 0
    dead_id = leader.settings.node_id
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(2.0, 6.0)).start()
    try:
        assert eventually(lambda: cluster.table.claimed(dead_id) >= 20, timeout=20, every=0.02)
        killed_at = time.monotonic()
        leader.kill()
        held_at_kill = cluster.table.claimed(dead_id)
        assert eventually(lambda: other.metric("chronos_leader") == 1, timeout=30, every=0.05)
        elected_s = time.monotonic() - killed_at
        assert eventually(lambda: cluster.table.claimed(dead_id) == 0, timeout=30, every=0.05)
        takeover_s = time.monotonic() - killed_at
        time.sleep(3)
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=90, quiet=2.0)
    taken = [
        e
        for e in other.events("suspected_failure")
        if e.get("node") == dead_id and e.get("cause") == "heartbeat_lapsed"
    ]
    record_result(
        ScenarioResult.of(
            "14-leader-crash",
            "kill -9 of the leader of two nodes at 100 msg/s, default settings",
            report,
            elected_s,
            new_leader_after_s=round(elected_s, 2),
            claim_takeover_s=round(takeover_s, 2),
            claims_held_at_kill=held_at_kill,
            claims_taken_over=len(taken),
            liveness_window_s=window_s,
        )
    )
    assert elected_s <= window_s + 1, f"new leader after {elected_s:.2f} s"
    assert held_at_kill > 0
    assert taken, "the new leader did not reset the dead leader's claims"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
