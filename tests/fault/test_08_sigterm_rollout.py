"""Scenario 8 — SIGTERM during load, as a Kubernetes rollout does it: two nodes under 100
messages per second; each in turn gets SIGTERM while it holds claims, and is replaced.

Pass: each terminated node exits 0 within its shutdown timeout and leaves no row claimed; its
rows are handed over at once, never through the failure detector (no ``suspected failure``
anywhere, so nothing waits for the hold time); lost 0; nothing early; copies only of records
in flight at a rebalance (past the group's committed offsets when it began, acknowledged before
it began: ``tests/fault/bounds.py``, ``Rebalances``; a partition revoked from a peer when the
replacement joins may replay records whose messages already fired); no message later than
``LATE_BOUND_MS`` (a SIGTERM hand-over, 1-3 s in docs/reliability.md, + the margin). (The
bound was 100 copies per rebalance, one consumed batch tuned to 100, and no lateness bound: a
rollout was checked for loss only.)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.fault.bounds import MARGIN_S, Rebalances, copies_outside
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import Cluster, NodeProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LATE_BOUND_MS = (3.0 + MARGIN_S) * 1000  # a SIGTERM hand-over (1-3 s) + the margin


def terminate_holding_claims(cluster: Cluster, node: NodeProcess) -> dict[str, float]:
    limit = time.monotonic() + 10
    while not cluster.table.claimed(node.node_id) and time.monotonic() < limit:
        time.sleep(0.005)
    held = cluster.table.claimed(node.node_id)
    started = time.monotonic()
    code = node.terminate()
    took = time.monotonic() - started
    left = cluster.table.claimed(node.node_id)
    return {"held": held, "exit": code, "seconds": took, "left": left}


def test_rolling_sigterm_under_load(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    cluster.start_many(2)
    cluster.wait_ready()
    shutdown_s = cluster.overrides["shutdown_timeout_ms"] / 1000
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(1.0, 3.0)).start()
    stops: list[dict[str, float]] = []
    rebalances = Rebalances(cluster, load)
    try:
        time.sleep(4)
        for node in list(cluster.live()):
            with rebalances.one():
                stops.append(terminate_holding_claims(cluster, node))
                cluster.start()
                cluster.wait_ready()
            time.sleep(2)
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=20), cluster.table.count()
    suspected = cluster.events("suspected_failure")
    record_result(
        ScenarioResult.of(
            "08-sigterm-rollout",
            "rolling SIGTERM of 2 nodes holding claims, under load",
            report,
            report.late.max / 1000,
            longest_shutdown_s=round(max(s["seconds"] for s in stops), 2),
            stops=stops,
            suspected_failures=len(suspected),
            in_flight_at_rebalances=len(rebalances.ids),
        )
    )
    assert all(s["held"] > 0 for s in stops), f"a node held no claim at SIGTERM: {stops}"
    assert [s["exit"] for s in stops] == [0] * len(stops), stops
    assert all(s["seconds"] <= shutdown_s for s in stops), stops
    assert [s["left"] for s in stops] == [0] * len(stops), f"rows left claimed: {stops}"
    assert suspected == [], f"{len(suspected)} rows went through the failure detector"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    outside = copies_outside(report, rebalances.ids)
    assert not outside, f"{len(outside)} copies of records not in flight at a rebalance"
    assert report.duplicates <= len(rebalances.ids), report.summary()
    assert report.late.max <= LATE_BOUND_MS, report.summary()
