"""Scenario 28 — one of three shards' Postgres stopped under load (docs/shards.md): three
databases, each its own server, one per partition of the input topic (the default map: partition
p in shard p); two nodes at the shipped defaults; 100 messages a second due 1-3 s after they are
sent; shard 2's server stopped for ``DOWN_S`` (20 s in the suite; ``CHRONOS_FAULT_LONG=1``: the
issue's 60 s), then started again.

Pass:

* lost 0, nothing early; copies at most the rows shard 2 had claimed when it stopped;
* the other shards go on: the messages of partitions 0 and 1 due while shard 2 is down fire on
  time (p99 lateness within ``ON_TIME_MS``): intake holds back shard 2's partition only, and the
  firing lanes of shards 0 and 1 do not wait for shard 2's;
* the stopped shard's messages due meanwhile fire within ``RECOVERY_S`` of its return;
* no node exits, and ``/health/live`` answers 200 at every probe (two a second); midway through
  the outage every node is ready, its readiness says ``shards away: 2`` and
  ``chronos_dependency_up{dependency="postgres-2"}`` reads 0; each node logs shard 2's outage
  once and its return once, nothing of the other shards;
* a third node started during the outage is ready while shard 2 is still away, and joins
  shard 2 (registered there, its lane started) once it is back.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from chronos.config.shards import ShardMap
from chronos.embedded import EmbeddedPostgres
from chronos.embedded.process import free_port
from chronos.store import migrate
from tests.fault.test_16_dependency_outages import LivenessProbe
from tests.fault.test_21_broker_failover import readiness
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHARDS = 3
STOPPED = 2
ON_TIME_MS = 1_000
RECOVERY_S = 10.0
GAUGE = 'chronos_dependency_up{dependency="postgres-2"}'


@pytest.fixture
def shard_servers() -> Iterator[list[EmbeddedPostgres]]:
    """Shards 1 and 2's own Postgres servers (shard 0 is the suite's database)."""
    workspace = Path(tempfile.mkdtemp(prefix="chronos-shards-"))
    servers = [
        EmbeddedPostgres(workspace / f"shard{i}", free_port(), durable=False, workspace=workspace)
        for i in (1, 2)
    ]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(workspace, ignore_errors=True)


def _rows(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM chronos_messages").fetchone()
    return row[0] if row else -1


def _claimed(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM chronos_messages WHERE readied_at IS NOT NULL"
        ).fetchone()
    return row[0] if row else 0


def test_one_shard_stopped_the_others_fire_on_time_and_its_own_right_after(
    make_cluster: Callable[..., Cluster],
    migrated_database_url: str,
    shard_servers: list[EmbeddedPostgres],
    kafka_bootstrap: str,
    topics: Topics,
    long_run: bool,
) -> None:
    down_s = 60.0 if long_run else 20.0
    assert topics.partitions == SHARDS
    urls = [migrated_database_url] + [server.start() for server in shard_servers]
    for shard, url in enumerate(urls):
        migrate.upgrade(url)
        migrate.record_shard(url, shard, ShardMap(SHARDS))  # as `chronos migrate` does
    cluster = make_cluster()
    cluster.database_url = " ".join(urls)  # every shard, shard 0 first
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    probe = LivenessProbe(nodes)
    with probe.running():
        load = Load(kafka_bootstrap, topics.input, rate=100, delay=(1.0, 3.0)).start()
        time.sleep(5)
        claimed = _claimed(urls[STOPPED])
        shard_servers[STOPPED - 1].stop()
        stopped_at = time.time()
        late = cluster.start("late")  # started during the outage
        cluster.wait_started([late], timeout=down_s / 2)
        time.sleep(max(0.0, stopped_at + down_s / 2 - time.time()))
        said = {n.name: (readiness(n), n.metrics().get(GAUGE)) for n in nodes}
        late_ready = readiness(late)
        time.sleep(max(0.0, stopped_at + down_s - time.time()))
        shard_servers[STOPPED - 1].start()
        back_at = time.time()
        time.sleep(5)
        messages = load.stop()
        report = cluster.check(expectations(messages), timeout=90, quiet=2.0)
    crashed = [n.name for n in [*nodes, late] if not n.alive()]
    assert not crashed, f"nodes exited: {crashed}\n{cluster.logs()}"
    drained = cluster.table.wait(lambda _: all(_rows(url) == 0 for url in urls), timeout=30)
    assert drained, [_rows(url) for url in urls]

    sent = {m.track: m for m in messages}
    partition_of = {track: acked[0] for track, acked in load.acked.items()}
    others_late: list[float] = []
    stopped_recovery: list[float] = []
    for track, message in sent.items():
        deadline_ms = message.expectation.deadline_ms
        if deadline_ms is None or track not in report.fired_at:
            continue
        fired_ms = report.fired_at[track]
        if not stopped_at * 1000 <= deadline_ms <= back_at * 1000:
            continue
        if partition_of.get(track) == STOPPED:
            stopped_recovery.append(fired_ms / 1000 - back_at)
        else:
            others_late.append(fired_ms - deadline_ms)
    others_p99 = statistics.quantiles(others_late, n=100)[98] if len(others_late) > 1 else 0.0
    recovery = max(stopped_recovery, default=0.0)
    record_result(
        ScenarioResult.of(
            "28-shard-outage",
            f"one of three shards' Postgres stopped {down_s:.0f} s",
            report,
            max(0.0, recovery),
            others_due_while_down=len(others_late),
            others_p99_ms=round(others_p99),
            others_max_ms=round(max(others_late, default=0.0)),
            stopped_due_while_down=len(stopped_recovery),
            claimed_at_fault=claimed,
            liveness_probes=probe.probes,
            liveness_failures=len(probe.failures),
        )
    )
    summary = (
        f"{report.summary()}; others due while down {len(others_late)}, p99 {others_p99:.0f} ms; "
        f"the stopped shard's {len(stopped_recovery)}, last {recovery:.1f} s after its return"
    )
    assert report.lost == [] and report.misrouted == [], summary
    assert report.early == {}, summary
    assert report.duplicates <= claimed, summary
    assert len(others_late) > 100 and len(stopped_recovery) > 50, summary
    assert others_p99 <= ON_TIME_MS, summary
    assert recovery <= RECOVERY_S, summary
    assert probe.failures == [], f"liveness failed: {probe.failures[:3]}"
    # One line when shard 2 went and one when it came back, per node (and nothing of the others).
    for node in nodes:
        went = [e.get("dependency") for e in node.events("dependency_down")]
        back = [e.get("dependency") for e in node.events("dependency_up")]
        assert (went, back) == (["postgres-2"], ["postgres-2"]), (node.name, went, back)
    # While it was down, every node was ready and said which shard was away.
    for (status, checks), up in said.values():
        assert (status, checks["postgres"], up) == (200, "shards away: 2", 0.0), said
    # The node started meanwhile was ready without shard 2, and joined it once it was back.
    assert (late_ready[0], late_ready[1]["postgres"]) == (200, "shards away: 2"), late_ready
    assert [e.get("shard") for e in late.events("shard_joined")] == [STOPPED], late.tail()
    with psycopg.connect(urls[STOPPED], connect_timeout=5) as conn:
        registered = {r[0] for r in conn.execute("SELECT node_id::text FROM chronos_nodes")}
    assert late.node_id in registered, registered
