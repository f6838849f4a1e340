"""Scenario 26 — a node killed under each consumer-group protocol: how long its input waits.

Two ``chronos run`` processes at the default settings (only their HTTP ports apart), on the
embedded broker, 100 messages per second (due 2-6 s later); one node is killed with SIGKILL and
the load goes on until the survivor holds every input partition, then 3 s more. Run once with
``CHRONOS_GROUP_PROTOCOL=classic`` (the default: the client's 20 s session timeout) and once with
``consumer`` (KIP-848: the broker's ``group.consumer.session.timeout.ms``, 45 s by default, the
least its ``group.consumer.min.session.timeout.ms`` allows). Pass: lost 0, early 0, the
failover within the protocol's session timeout plus a rebalance (``bounds.JOIN_MARGIN_S``),
lateness at most that (a record produced into the dead node's partitions waits for it), copies
only of the rows the dead node held claimed or of records past the group's committed offsets at
the kill, no more than those. Recorded: the input failover (kill -> the survivor holds every
input partition).
docs/reliability.md ("Kafka behaviours on the real broker") gives the figures and why
``classic`` stays the default.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from chronos.kafka.config import SESSION_TIMEOUT_MS
from tests.fault.bounds import JOIN_MARGIN_S, committed_offsets, copies_outside, in_flight
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import SHIPPED_TIMINGS, Cluster

from .conftest import LONG_RUN_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEFAULTS: dict[str, Any] = dict(SHIPPED_TIMINGS)
# The session timeout each protocol waits out after a SIGKILL (the client's; the broker's).
SESSION_S = {"classic": SESSION_TIMEOUT_MS / 1000, "consumer": 45.0}
# The new protocol's variant waits out the broker's session (45 s at the least) by design: it
# re-measures a broker default, so it runs with the full-size variants (CHRONOS_FAULT_LONG=1);
# tests/integration/test_group_protocol.py proves on every run that the node's consumer works
# under it (two members sharing the partitions, a stopped node's hand-over).
PROTOCOLS = ["classic", "consumer"] if os.environ.get(LONG_RUN_ENV) == "1" else ["classic"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_kill_one_of_two_nodes(
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
    protocol: str,
) -> None:
    cluster = make_cluster(**DEFAULTS, group_protocol=protocol)
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    victim, survivor = nodes
    wanted = {(topics.input, p) for p in range(topics.partitions)}
    limit = SESSION_S[protocol] + JOIN_MARGIN_S
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(2.0, 6.0)).start()
    try:
        time.sleep(3)
        committed = committed_offsets(cluster)  # before the kill: the victim commits no more
        held = set(cluster.table.claims_of(victim.node_id))
        killed_wall = time.time()
        killed_at = time.monotonic()
        victim.kill()
        held |= set(cluster.table.claims_of(victim.node_id))
        while survivor.assignment() != wanted and time.monotonic() - killed_at < limit + 30:
            time.sleep(0.05)
        failover_s = time.monotonic() - killed_at
        time.sleep(3)
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=90, quiet=2.0)
    print(f"\n{protocol}: input failover {failover_s:.2f} s after the kill")
    record_result(
        ScenarioResult.of(
            f"26-group-protocol-{protocol}",
            f"kill -9 of one of two nodes, CHRONOS_GROUP_PROTOCOL={protocol}",
            report,
            failover_s,
            input_failover_s=round(failover_s, 2),
            late_max_ms=round(report.late.max),
        )
    )
    assert survivor.assignment() == wanted, f"no failover within {failover_s:.0f} s"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert failover_s <= limit, f"input failover after {failover_s:.1f} s (limit {limit:.0f} s)"
    # A record produced into the victim's partitions waits for the failover, less its delay.
    assert report.late.max <= limit * 1000, f"late beyond {limit:.0f} s: {report.summary()}"
    read_again = in_flight(load.acked, committed, range(topics.partitions), killed_wall + 0.5)
    beyond = copies_outside(report, held | read_again)
    assert beyond == {}, f"{len(beyond)} duplicated beyond the bound: {report.summary()}"
    assert report.duplicates <= len(held | read_again), report.summary()  # one copy each
