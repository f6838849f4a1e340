"""Scenario 5 — Postgres faults under load: connections killed (``pg_terminate_backend``) and
the server restarted, while two nodes consume and fire 100 messages per second.

Pass:

* no node exits (no crash, hence no crash loop) and none spins: while Postgres is down each
  node uses less than ``MAX_CPU_SHARE`` of a core and logs at most ``MAX_ERRORS_PER_S``
  database errors per second (retries back off);
* no input offset is committed for a record that was not durable: while Postgres is down, the
  group's committed offset of every partition stays at or below the first record produced after
  the server went down (nothing produced later can have been stored);
* lost 0, nothing early, duplicates at most the rows claimed when the fault struck (their
  deletes may fail; the rows are then given back or taken over and fired again);
* recovery: once Postgres is back, everything due meanwhile has fired within the longest retry
  backoff (5 s) + liveness window + detection interval (+ ``SLACK_S``): nothing waits for the
  hold time (a node whose deletes failed still holds and retries them; one whose lease lapsed
  gives its claims back when its heartbeat succeeds again; a dead one is seen dead after the
  window). It was backoff + hold + detection: 28.5 s at the shipped defaults, where 4.4 s was
  measured; no message later than the outage (4 s) + that bound (there was no lateness bound);
* connections terminated: no message later than the terminations' span (3 x 1.5 s) + the
  longest retry backoff (+ ``SLACK_S``) (there was no lateness bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from chronos.embedded import EmbeddedPostgres
from tests.fault.bounds import committed_offsets as committed_offsets  # scenario 25 imports it here
from tests.support import Topics
from tests.support.checker import (
    Load,
    Report,
    ScenarioResult,
    expectations,
    record_result,
)
from tests.support.cluster import Cluster, NodeProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_CPU_SHARE = 0.5
MAX_ERRORS_PER_S = 50
BACKOFF_CAP_S = 5.0
SLACK_S = 3.0


def terminate_backends(cluster: Cluster) -> int:
    rows = cluster.table.rows(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE 'chronos-%%' AND datname = current_database()"
    )
    return len(rows)


class Outage:
    """CPU time and database errors of the nodes over a time window."""

    def __init__(self, nodes: list[NodeProcess]):
        self.nodes = nodes
        self.started = time.monotonic()
        self.cpu = {n.name: n.cpu_seconds() for n in nodes}
        self.errors = {n.name: len(n.events("database_error")) for n in nodes}

    def end(self) -> tuple[dict[str, float], dict[str, float]]:
        seconds = time.monotonic() - self.started
        cpu = {n.name: (n.cpu_seconds() - self.cpu[n.name]) / seconds for n in self.nodes}
        errors = {
            n.name: (len(n.events("database_error")) - self.errors[n.name]) / seconds
            for n in self.nodes
        }
        return cpu, errors


def run_under_load(
    cluster: Cluster,
    kafka_bootstrap: str,
    topics: Topics,
    fault: Callable[[], dict[str, Any]],
) -> tuple[Report, dict[str, Any]]:
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(1.0, 3.0)).start()
    time.sleep(3)
    info = fault()
    time.sleep(4)
    messages = load.stop()
    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=20), cluster.table.count()
    crashed = [n.name for n in nodes if not n.alive()]
    assert not crashed, f"nodes exited: {crashed}\n{cluster.logs()}"
    info["messages"] = messages
    info["load"] = load
    return report, info


def test_connections_terminated_under_load(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()

    def fault() -> dict[str, Any]:
        claimed, killed = 0, 0
        for _ in range(3):
            claimed += cluster.table.claimed()
            killed += terminate_backends(cluster)
            time.sleep(1.5)
        return {"claimed": claimed, "killed": killed}

    report, info = run_under_load(cluster, kafka_bootstrap, topics, fault)
    # A lost connection is an outage: the node logs it once as dependency_down (and each
    # retried statement at DEBUG); other statement failures as database_error.
    errors = sum(
        len(n.events("database_error")) + len(n.events("dependency_down")) for n in cluster.nodes
    )
    record_result(
        ScenarioResult.of(
            "05-postgres-terminate",
            "pg_terminate_backend of every node connection, 3 times",
            report,
            None,
            connections_killed=info["killed"],
            database_errors=errors,
            claimed_at_faults=info["claimed"],
        )
    )
    assert info["killed"] >= 6, "the nodes' connections were not found"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicates <= info["claimed"], report.summary()
    assert errors > 0, "no database error seen: the fault did not hit"
    late_bound_ms = (3 * 1.5 + BACKOFF_CAP_S + SLACK_S) * 1000
    assert report.late.max <= late_bound_ms, f"{report.summary()} (bound {late_bound_ms:.0f})"


def test_postgres_restarted_under_load(
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
    embedded_postgres: EmbeddedPostgres,
) -> None:
    cluster = make_cluster()
    down_s = 4.0
    window = cluster.overrides["liveness_window_ms"] / 1000
    detection = cluster.overrides["failure_detection_interval_ms"] / 1000

    def fault() -> dict[str, Any]:
        claimed = cluster.table.claimed()
        embedded_postgres.stop()
        stopped_at = time.time()
        window = Outage(cluster.live())
        time.sleep(1.0)  # records produced from now on cannot be durable anywhere
        cut = time.time()
        time.sleep(down_s - 1.0 - 0.5)
        committed = committed_offsets(cluster)
        cpu, errors = window.end()
        embedded_postgres.start()
        back_at = time.time()
        return {
            "claimed": claimed,
            "stopped_at": stopped_at,
            "cut": cut,
            "committed": committed,
            "cpu": cpu,
            "errors": errors,
            "back_at": back_at,
        }

    report, info = run_under_load(cluster, kafka_bootstrap, topics, fault)
    load: Load = info["load"]
    # The first record of each partition acknowledged after the cut.
    first_after: dict[int, int] = {}
    for partition, offset, acked in load.acked.values():
        if acked >= info["cut"]:
            first_after[partition] = min(offset, first_after.get(partition, offset))
    sent = {m.track: m for m in info["messages"]}
    due_before_back = [
        t
        for t, m in sent.items()
        if m.expectation.deadline_ms is not None
        and m.expectation.deadline_ms / 1000 <= info["back_at"]
        and t in report.fired_at
    ]
    recovery = max(report.fired_at[t] for t in due_before_back) / 1000 - info["back_at"]
    record_result(
        ScenarioResult.of(
            "05-postgres-restart",
            f"Postgres stopped {down_s:.0f} s and restarted",
            report,
            max(0.0, recovery),
            cpu_share_while_down=info["cpu"],
            database_errors_per_s_while_down=info["errors"],
            committed_while_down=info["committed"],
            first_offset_after_cut=first_after,
            claimed_at_fault=info["claimed"],
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicates <= info["claimed"], report.summary()
    for partition, committed in info["committed"].items():
        if partition in first_after and committed >= 0:
            assert committed <= first_after[partition], (
                f"partition {partition}: offset {committed} committed while Postgres was down, "
                f"beyond the first record produced after it went down ({first_after[partition]})"
            )
    spinning = {n: c for n, c in info["cpu"].items() if c > MAX_CPU_SHARE}
    assert not spinning, f"CPU share of a core while Postgres was down: {info['cpu']}"
    noisy = {n: e for n, e in info["errors"].items() if e > MAX_ERRORS_PER_S}
    assert not noisy, f"database errors per second while down: {info['errors']}"
    bound = BACKOFF_CAP_S + window + detection + SLACK_S
    assert recovery <= bound, f"recovered {recovery:.1f} s after Postgres returned (> {bound})"
    # Every message: at most the outage and that recovery late.
    late_bound_ms = (down_s + bound) * 1000
    assert report.late.max <= late_bound_ms, f"{report.summary()} (bound {late_bound_ms:.0f})"
