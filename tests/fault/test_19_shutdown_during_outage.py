"""Scenario 19 — SIGTERM while a dependency is away: a rolling update or a scale-in during a
database failover or a broker partition. The node's graceful drain cannot finish (nothing can be
deleted, confirmed or committed), so it must still end within ``CHRONOS_SHUTDOWN_TIMEOUT_MS``
(intake's statement and delivery waits included) plus a small margin, never hang until the
orchestrator's SIGKILL; and nothing is lost (what it held is fired by the peer once the
dependency is back).

Bounds besides (``tests/fault/bounds.py``): nothing early; no message later than the outage +
the input failover (consumer session 20 s + 5 s: a node stopped while the broker is away cannot
leave the group, so its partitions move when its session lapses) + the margin; copies only of
rows claimed from the outage until a few seconds after it or of records past the group's
committed offsets when it began (what the peer reads again), no more than those. (There was no
lateness or duplicate bound.)
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from chronos.embedded import EmbeddedKafka, EmbeddedPostgres
from tests.fault import bounds
from tests.fault.bounds import ClaimWatch, committed_offsets, copies_outside
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MARGIN_S = 3.0  # interpreter exit, the intake process's own exit, process reaping


def stop_during_outage(
    cluster: Cluster,
    kafka_bootstrap: str,
    topics: Topics,
    name: str,
    fault: str,
    stop: Callable[[], object],
    restart: Callable[[], object],
) -> None:
    leaving, staying = cluster.start_many(2)
    cluster.wait_ready()
    load = Load(kafka_bootstrap, topics.input, rate=50, delay=(1.0, 3.0)).start()
    time.sleep(3)
    bound = cluster.overrides["shutdown_timeout_ms"] / 1000 + MARGIN_S
    committed = committed_offsets(cluster)
    with ClaimWatch(cluster.table) as watch:
        stop()
        down_at = time.monotonic()
        try:
            time.sleep(2)  # the nodes notice the outage
            asked = time.monotonic()
            leaving.send(signal.SIGTERM)
            code = leaving.wait_exit(bound + 30)
            took = time.monotonic() - asked
        finally:
            restart()
        outage_s = time.monotonic() - down_at
        back_at = time.time()
        time.sleep(3)  # rows claimed as the dependency returns
    messages = load.stop(timeout=60)
    report = cluster.check(expectations(messages), timeout=90, quiet=3.0)
    record_result(
        ScenarioResult.of(
            name, fault, report, None, shutdown_s=round(took, 1), exit_code=code, bound_s=bound
        )
    )
    assert code is not None and took <= bound, (
        f"SIGTERM during the outage: exit {code} after {took:.1f} s (bound {bound:.0f} s)\n"
        f"{leaving.tail(30)}"
    )
    assert staying.alive(), cluster.logs()
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    late_bound_ms = (outage_s + bounds.input_failover_s(staying.settings) + MARGIN_S) * 1000
    assert report.late.max <= late_bound_ms, f"{report.summary()} (bound {late_bound_ms:.0f})"
    partitions = range(topics.partitions)
    allowed = watch.ids | bounds.in_flight(dict(load.acked), committed, partitions, back_at)
    outside = copies_outside(report, allowed)
    assert not outside, f"{len(outside)} copies of rows neither claimed nor past the commit"
    assert report.duplicates <= len(allowed), report.summary()


def test_sigterm_while_postgres_is_away_ends_within_the_shutdown_timeout(
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
    embedded_postgres: EmbeddedPostgres,
) -> None:
    stop_during_outage(
        make_cluster(),
        kafka_bootstrap,
        topics,
        "19-sigterm-postgres-away",
        "SIGTERM of one of two nodes while Postgres is stopped",
        embedded_postgres.stop,
        embedded_postgres.start,
    )


def test_sigterm_while_the_broker_is_frozen_ends_within_the_shutdown_timeout(
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
    embedded_broker: EmbeddedKafka,
) -> None:
    pid = embedded_broker.pid
    assert pid is not None
    stop_during_outage(
        make_cluster(),
        kafka_bootstrap,
        topics,
        "19-sigterm-broker-away",
        "SIGTERM of one of two nodes while the broker is SIGSTOPped",
        lambda: os.kill(pid, signal.SIGSTOP),
        lambda: os.kill(pid, signal.SIGCONT),
    )
