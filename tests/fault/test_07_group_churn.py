"""Scenario 7 — consumer-group churn under load: 1 -> 3 -> 1 nodes with a rolling restart in
between, while 100 messages per second come in (due 1-4 s later).

Every join and leave rebalances the input partitions. Pass: lost 0, nothing early, every node
stopped with SIGTERM exits 0, the table ends empty, and duplicates stay within one consumed
batch per rebalance (a batch whose offsets could not be stored because its partition was
revoked is replayed by the next owner; the replay is idempotent unless those messages already
fired). Recorded: duplicates, the number of rebalances and, as the recovery time, the worst
lateness (a partition waits for the group to settle while it changes hands).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import Cluster, NodeProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BATCH = 100  # consume batch size: what one rebalance may replay


def test_group_churn_one_three_one_with_rolling_restart(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster(consume_batch_size=BATCH)
    cluster.start()
    cluster.wait_ready()
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(1.0, 4.0)).start()
    stopped: list[tuple[NodeProcess, int]] = []
    rebalances = 0
    try:
        time.sleep(3)
        cluster.start_many(2)  # 1 -> 3
        cluster.wait_ready()
        rebalances += 2
        time.sleep(2)
        for node in list(cluster.live()):  # rolling restart, one at a time
            stopped.append((node, node.terminate()))
            cluster.start()
            cluster.wait_ready()
            rebalances += 2
            time.sleep(1)
        for node in cluster.live()[:-1]:  # 3 -> 1, one node at a time
            stopped.append((node, node.terminate()))
            rebalances += 1
            cluster.wait_ready()
        time.sleep(3)
    finally:
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=20), cluster.table.count()
    allowed = rebalances * BATCH
    record_result(
        ScenarioResult.of(
            "07-group-churn",
            "1 -> 3 -> 1 nodes with a rolling restart, under load",
            report,
            report.late.max / 1000,
            rebalances=rebalances,
            allowed_duplicates=allowed,
            nodes_started=len(cluster.nodes),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert [code for _, code in stopped] == [0] * len(stopped), [
        (n.name, code) for n, code in stopped
    ]
    assert report.duplicates <= allowed, report.summary()
    assert len(cluster.live()) == 1
