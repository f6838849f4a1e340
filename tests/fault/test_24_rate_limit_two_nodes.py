"""Scenario 24 - a tenant rate-limited cluster-wide on two nodes: ``COUNT`` of its messages come
due at once while a stream of another tenant keeps arriving; tenant "acme" is limited to
``LIMIT`` msg/s (as ``chronos admin limit --tenant acme --per-second`` stores it).

Pass: over every 10-s window the fired rate of "acme" stays within the limit +10 % (and the
backlog drains at the limit -10 % at least, nothing dropped), the other tenant fires on time
(p99 ≤ 200 ms late), lost 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from chronos.protocol.names import TENANT_HEADER
from chronos.store import PauseKind, PostgresStore
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.checker.sending import send
from tests.support.checker.sent import due_in
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 1_500
LIMIT = 100
WINDOW_MS = 10_000


def test_a_limited_tenant_fires_within_its_limit_on_two_nodes(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    cluster.start_many(2)
    cluster.wait_ready()
    store = PostgresStore(cluster.database_url)
    store.set_limit(PauseKind.TENANT, "acme", LIMIT, "fault test")
    store.close()
    time.sleep(1.5)  # every node has read the limit
    acme = [due_in(3.0, extra_headers=[(TENANT_HEADER, b"acme")]) for _ in range(COUNT)]
    load = Load(kafka_bootstrap, topics.input, rate=50, delay=(1.0, 3.0)).start()
    try:
        send(kafka_bootstrap, topics.input, acme)
        time.sleep(COUNT / LIMIT + 3)
    finally:
        others = load.stop()
    report = cluster.check(expectations(acme + others), timeout=60, quiet=2.0)
    fired = sorted(report.fired_at[m.track] for m in acme if m.track in report.fired_at)
    windows = [
        sum(1 for f in fired if start <= f < start + WINDOW_MS) / (WINDOW_MS / 1000)
        for start in range(fired[0], max(fired[0], fired[-1] - WINDOW_MS) + 1, 250)
    ]
    drain_s = (fired[-1] - fired[0]) / 1000
    lateness = sorted(
        report.fired_at[m.track] - (m.expectation.deadline_ms or 0)
        for m in others
        if m.track in report.fired_at
    )
    p99 = lateness[int(0.99 * (len(lateness) - 1))] if lateness else 0
    record_result(
        ScenarioResult.of(
            "24-rate-limit-two-nodes",
            f"{COUNT} messages of a tenant limited to {LIMIT} msg/s, on 2 nodes",
            report,
            p99 / 1000,
            busiest_10s_rate=max(windows),
            drain_rate=round(len(fired) / drain_s, 1),
            others_p99_ms=p99,
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert len(fired) == COUNT, report.summary()
    assert max(windows) <= 1.1 * LIMIT, f"busiest 10 s: {max(windows)} msg/s"
    assert len(fired) / drain_s >= 0.9 * LIMIT, f"drained at {len(fired) / drain_s:.0f} msg/s"
    assert p99 <= 200, f"the other tenant's p99 lateness: {p99} ms"
