"""Scenario 23 - a tenant paused cluster-wide on two nodes: messages of tenant "acme" are claimed
ahead by both nodes, then "acme" is paused (as ``chronos admin pause --tenant acme`` stores it).

Pass: within a second no node fires "acme" any more (the rows they held are given back), while
the other tenant's messages fire on time (p99 ≤ 200 ms late); the paused messages wait in the
table past their deadlines; once resumed, every one of them fires, none later than the resume +
``ON_TIME_MS``; lost 0, nothing early, no copy (a pause gives back only what was not published;
there was neither check).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from chronos.protocol.names import TENANT_HEADER
from chronos.store import PauseKind, PostgresStore
from tests.fault.bounds import ON_TIME_MS
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.checker.sending import send
from tests.support.checker.sent import due_in
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAUSED = 400


def test_a_paused_tenant_waits_on_both_nodes_and_fires_on_resume(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()  # the shipped defaults (it ran with a 2-s lookahead, for nothing)
    cluster.start_many(2)
    cluster.wait_ready()
    store = PostgresStore(cluster.database_url)
    acme = [due_in(3.0 + i / 200, extra_headers=[(TENANT_HEADER, b"acme")]) for i in range(PAUSED)]
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(1.0, 3.0)).start()
    try:
        send(kafka_bootstrap, topics.input, acme)
        # claimed ahead (within the lookahead) by the nodes, then paused
        held = (
            "SELECT count(*) FROM chronos_messages WHERE tenant = 'acme' AND readied_at IS NOT NULL"
        )
        assert cluster.table.wait(lambda t: t.scalar(held) > 0, timeout=10)
        store.pause(PauseKind.TENANT, "acme", "fault test")
        paused_at_ms = time.time() * 1000
        time.sleep(6)  # every acme message now past its deadline
        waiting = cluster.table.count()
        store.resume(PauseKind.TENANT, "acme")
        resumed_at_ms = time.time() * 1000
        time.sleep(3)
    finally:
        others = load.stop()
        store.close()
    report = cluster.check(expectations(acme + others), timeout=60, quiet=2.0)
    fired_paused = [report.fired_at[m.track] for m in acme if report.fired_at.get(m.track, 0) > 0]
    during = [f for f in fired_paused if paused_at_ms + 1_000 < f < paused_at_ms + 6_000]
    lateness = sorted(
        report.fired_at[m.track] - (m.expectation.deadline_ms or 0)
        for m in others
        if m.track in report.fired_at
    )
    p99 = lateness[int(0.99 * (len(lateness) - 1))] if lateness else 0
    record_result(
        ScenarioResult.of(
            "23-pause-two-nodes",
            f"tenant paused on 2 nodes with {PAUSED} of its messages claimed ahead or due",
            report,
            p99 / 1000,
            fired_while_paused=len(during),
            waiting_at_resume=waiting,
            others_p99_ms=p99,
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert during == [], f"{len(during)} acme messages fired while paused"
    assert waiting > 0
    assert len(fired_paused) == PAUSED, report.summary()
    assert p99 <= 200, f"the other tenant's p99 lateness: {p99} ms"
    assert report.early == {} and report.duplicates == 0, report.summary()
    # A paused message waits for the resume, then fires on time; nothing waits longer.
    first_due = min(m.expectation.deadline_ms or resumed_at_ms for m in acme)
    late_bound_ms = resumed_at_ms - first_due + ON_TIME_MS
    assert report.late.max <= late_bound_ms, f"{report.summary()} (bound {late_bound_ms:.0f})"
