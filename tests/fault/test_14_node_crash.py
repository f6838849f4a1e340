"""Scenario 14 — a node crashes (kill -9) at the shipped defaults: the survivor takes over in
seconds.

Two ``chronos run`` processes at the defaults (only their HTTP ports apart). The bounds come from
the settings (``tests/fault/bounds.py``, docs/architecture.md "What a node crash costs"): its
claims fire elsewhere within the **takeover** (liveness window 5 s + detection 0.5 s + poll
0.1 s + 1.5 s margin = 7.1 s after the kill), its input partitions are consumed by the survivor
within the **input failover** (consumer session 20 s + 5 s for the rebalance = 25 s).

* **crash under load**: 500 messages per second, each due 4-12 s after it is sent; 8 s into the
  load one node (not the leader) is killed with SIGKILL, and the load goes on until both
  recoveries were seen and 12 s have passed.
* **leader crash**: 100 messages per second (due 2-6 s later); the leader is killed with SIGKILL
  while it holds claims. The other node reports ``chronos_leader 1`` within the window +
  detection interval (+ 0.5 s) of the kill, and its sweeps reset the dead leader's claims
  itself (``suspected_failure`` events, cause ``heartbeat_lapsed``) within the takeover.

Pass (both): lost 0, early 0; the dead node's claims reset within the takeover and its input
moved within the input failover; lateness: the rows it held at its death at most the takeover,
the records of its input partitions at most the input failover less their shortest delay (they
waited for the group to notice the death), every other message at most ``ON_TIME_MS``; copies
only of the rows it held or of the records it had consumed past the group's committed offsets
(read again by the survivor), at most one each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from tests.fault.bounds import (
    ON_TIME_MS,
    committed_offsets,
    copies_outside,
    in_flight,
    input_failover_s,
    lateness,
    takeover_s,
)
from tests.support import Topics
from tests.support.checker import (
    Load,
    Outgoing,
    Report,
    ScenarioResult,
    expectations,
    record_result,
)
from tests.support.cluster import Cluster, NodeProcess
from tests.support.polling import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]


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


@dataclass
class Crash:
    """What a kill -9 left behind, and when (seconds after the kill) each recovery was seen."""

    partitions: set[int]  # the victim's input partitions
    held: set[str]  # the rows it held claimed
    committed: dict[int, int]  # the group's committed offsets right after the kill
    killed_at: float  # epoch seconds
    seen: dict[str, float] = field(default_factory=dict)


def kill_and_watch(
    cluster: Cluster, load: Load, victim: NodeProcess, survivor: NodeProcess
) -> Crash:
    """SIGKILL ``victim``; wait until its claims are reset (``takeover``), the survivor holds
    every input partition (``failover``) and, when it led, the survivor leads (``leader``)."""
    topics = cluster.topics
    partitions = {p for t, p in victim.assignment() if t == topics.input}
    was_leader = victim.metric("chronos_leader") == 1
    killed_at, killed_wall = time.monotonic(), time.time()
    victim.kill()
    held = set(cluster.table.claims_of(victim.node_id))
    committed = committed_offsets(cluster)  # the dead node commits nothing more
    crash = Crash(partitions, held, committed, killed_wall)
    wanted = {(topics.input, p) for p in range(topics.partitions)}
    conditions: dict[str, Callable[[], bool]] = {
        "failover": lambda: survivor.assignment() == wanted,
        "takeover": lambda: cluster.table.claimed(victim.node_id) == 0,
    }
    if was_leader:
        conditions["leader"] = lambda: survivor.metric("chronos_leader") == 1
    limit = input_failover_s(survivor.settings) + 10
    while len(crash.seen) < len(conditions) and time.monotonic() - killed_at < limit:
        for name, holds in conditions.items():
            if name not in crash.seen and holds():
                crash.seen[name] = time.monotonic() - killed_at
        time.sleep(0.05)
    return crash


def judge(
    crash: Crash, report: Report, messages: list[Outgoing], load: Load, survivor: NodeProcess
) -> dict[str, float]:
    """Assert the bounds of the module docstring; returns the measured figures."""
    settings = survivor.settings
    takeover, failover = takeover_s(settings), input_failover_s(settings)
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert set(crash.seen) >= {"takeover", "failover"}, f"not recovered: {crash.seen}"
    assert crash.seen["takeover"] <= takeover, f"claims reset {crash.seen} (bound {takeover} s)"
    assert crash.seen["failover"] <= failover, f"input moved {crash.seen} (bound {failover} s)"
    late = lateness(report, messages)
    moved = {t for t in late if load.acked[t][0] in crash.partitions}
    shortest = min(load.delay)
    groups = {
        "held": ({t for t in late if t in crash.held}, takeover * 1000),
        "moved": (moved - crash.held, (failover - shortest) * 1000),
        "other": (set(late) - moved - crash.held, ON_TIME_MS),
    }
    worst = {
        name: max((late[t] for t in tracks), default=0) for name, (tracks, _) in groups.items()
    }
    over = {name: worst[name] for name, (_, bound) in groups.items() if worst[name] > bound}
    assert not over, f"later than bound (ms): {over}, bounds {groups_bounds(groups)}"
    read_again = in_flight(dict(load.acked), crash.committed, crash.partitions, crash.killed_at)
    allowed = crash.held | read_again
    outside = copies_outside(report, allowed)
    assert not outside, (
        f"{len(outside)} copies of messages neither held nor in flight: "
        f"{[explain(t, crash, report, load) for t in list(outside)[:5]]}"
    )
    assert report.duplicates <= len(allowed), report.summary()
    measured: dict[str, float] = {f"late_{name}_max_ms": w for name, w in worst.items()}
    measured["in_flight_at_kill"] = len(read_again)
    return measured


def explain(track: str, crash: Crash, report: Report, load: Load) -> dict[str, object]:
    """Where a copied message was, for a failure's message."""
    partition, offset, acked = load.acked[track]
    deadline = next(m.expectation.deadline_ms for m in load.sent if m.track == track)
    return {
        "track": track,
        "partition": partition,
        "victim_partition": partition in crash.partitions,
        "offset": offset,
        "committed_at_kill": crash.committed.get(partition),
        "acked_after_kill_s": round(acked - crash.killed_at, 3),
        "deadline_after_kill_s": round((deadline or 0) / 1000 - crash.killed_at, 3),
        "fired_after_kill_s": sorted(
            round(o.timestamp_ms / 1000 - crash.killed_at, 3)
            for o in report.observations
            if o.track == track
        ),
    }


def groups_bounds(groups: dict[str, tuple[set[str], float]]) -> dict[str, float]:
    return {name: round(bound) for name, (_, bound) in groups.items()}


def test_kill_one_of_two_nodes_under_load(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    victim = next(n for n in nodes if n is not leader_of(nodes))
    survivor = next(n for n in nodes if n is not victim)
    load = Load(kafka_bootstrap, topics.input, rate=500, delay=(4.0, 12.0)).start()
    try:
        time.sleep(8)
        killed_at = time.monotonic()
        crash = kill_and_watch(cluster, load, victim, survivor)
        time.sleep(max(0.0, 12 - (time.monotonic() - killed_at)))
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=90, quiet=2.0)
    measured: dict[str, float] = {}
    try:
        measured = judge(crash, report, messages, load, survivor)
    finally:
        record_result(
            ScenarioResult.of(
                "14-node-crash",
                "kill -9 of one of two nodes at 500 msg/s, default settings",
                report,
                max(crash.seen.values(), default=None),
                input_failover_s=round(crash.seen.get("failover", -1), 2),
                claim_takeover_s=round(crash.seen.get("takeover", -1), 2),
                claims_held_at_kill=len(crash.held),
                **measured,
            )
        )
    assert survivor.alive()


def test_kill_the_leader(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    leader = leader_of(nodes)
    other = next(n for n in nodes if n is not leader)
    assert other.metric("chronos_leader") == 0
    dead_id = leader.settings.node_id
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(2.0, 6.0)).start()
    try:
        assert eventually(lambda: cluster.table.claimed(dead_id) >= 20, timeout=20, every=0.02)
        crash = kill_and_watch(cluster, load, leader, other)
        time.sleep(3)
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=90, quiet=2.0)
    taken = [
        e
        for e in other.events("suspected_failure")
        if e.get("node") == dead_id and e.get("cause") == "heartbeat_lapsed"
    ]
    settings = other.settings
    # docs/architecture.md: a new leader within the window + one detection interval (+ 0.5 s).
    elected_bound = (
        settings.liveness_window_ms + settings.failure_detection_interval_ms
    ) / 1000 + 0.5
    measured: dict[str, float] = {}
    try:
        assert crash.seen.get("leader", 1e9) <= elected_bound, (
            f"new leader after {crash.seen} (bound {elected_bound} s)"
        )
        assert crash.held, "the leader held no claim when it died"
        assert {e.get("message_id") for e in taken} == crash.held, (
            f"the new leader reset {len(taken)} of the dead leader's {len(crash.held)} claims"
        )
        measured = judge(crash, report, messages, load, other)
    finally:
        record_result(
            ScenarioResult.of(
                "14-leader-crash",
                "kill -9 of the leader of two nodes at 100 msg/s, default settings",
                report,
                crash.seen.get("leader"),
                new_leader_after_s=round(crash.seen.get("leader", -1), 2),
                claim_takeover_s=round(crash.seen.get("takeover", -1), 2),
                input_failover_s=round(crash.seen.get("failover", -1), 2),
                claims_held_at_kill=len(crash.held),
                claims_taken_over=len(taken),
                **measured,
            )
        )
