"""Scenario 29 — an input partition moved to another shard under load (``chronos shards move``,
docs/shards.md): two shards, each its own Postgres server (the default map over the three input
partitions: partitions 0 and 2 in shard 0, partition 1 in shard 1); two nodes at the shipped
defaults; 100 messages a second due 1-20 s after they are sent (a standing backlog of about a
thousand, a third of it in partition 2); besides, 300 messages due 15-20 s ahead, every one
cancelled: half before the move, half right as it starts (so some cancels reach the nodes while
the partition is held); then partition 2 moved to shard 1 by the command, run as a user runs it.

Pass:

* lost 0, nothing early, no copy; **no cancelled message fires** (its cancel honoured wherever
  its message was when it arrived: in shard 0 before the move, in shard 1 after);
* the command copies partition 2's waiting messages (hundreds, under load) and exits 0; then
  shard 0 holds no row of partition 2, and the nodes write its new messages to shard 1;
* partitions 0 and 1 flow on: their messages due during the move fire on time (p99 within
  ``ON_TIME_MS``); partition 2's due while it was held fire within ``RECOVERY_S`` of the move's
  end; no node exits.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from chronos.config.settings import as_environment
from chronos.config.shards import ShardMap
from chronos.embedded import EmbeddedPostgres
from chronos.embedded.launcher import child_environment
from chronos.embedded.process import free_port
from chronos.protocol import ACTION_HEADER, MESSAGE_ID_HEADER
from chronos.store import migrate
from tests.support import Topics
from tests.support.checker import (
    Load,
    ScenarioResult,
    due_in,
    expectations,
    record_result,
    send,
)
from tests.support.checker.sent import Outgoing, raw
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHARDS = 2
MOVED, TO = 2, 1  # partition 2 (shard 0's by the map) to shard 1
ON_TIME_MS = 1_000
RECOVERY_S = 5.0
CANCELLED = 300


@pytest.fixture
def second_server() -> Iterator[EmbeddedPostgres]:
    workspace = Path(tempfile.mkdtemp(prefix="chronos-move-"))
    server = EmbeddedPostgres(workspace / "shard1", free_port(), durable=False, workspace=workspace)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(workspace, ignore_errors=True)


def _partition_rows(url: str, partition: int) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute(
            "SELECT count(*) FROM chronos_messages WHERE input_partition = %s", (partition,)
        ).fetchone()
    return row[0] if row else -1


def _rows(url: str) -> int:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT count(*) FROM chronos_messages").fetchone()
    return row[0] if row else -1


def _cancel(message: Outgoing) -> Outgoing:
    """A cancel of ``message``: its id, its key (so its partition), no deadline."""
    message_id = dict(message.headers)[MESSAGE_ID_HEADER]
    return raw(
        [(MESSAGE_ID_HEADER, message_id), (ACTION_HEADER, b"cancel")],
        dead_letter=False,
        key=message.key,
        value=None,
    )


def test_a_partition_moved_under_load_loses_nothing_and_honours_its_cancels(
    make_cluster: Callable[..., Cluster],
    migrated_database_url: str,
    second_server: EmbeddedPostgres,
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    assert topics.partitions == 3
    urls = [migrated_database_url, second_server.start()]
    for shard, url in enumerate(urls):
        migrate.upgrade(url)
        migrate.record_shard(url, shard, ShardMap(SHARDS))  # as `chronos migrate` does
    both = " ".join(urls)
    cluster = make_cluster()
    cluster.database_url = both
    nodes = cluster.start_many(2)
    cluster.wait_ready()

    doomed = [due_in(15 + 5 * i / CANCELLED) for i in range(CANCELLED)]
    send(kafka_bootstrap, topics.input, doomed)
    load = Load(kafka_bootstrap, topics.input, rate=100, delay=(1.0, 20.0)).start()
    time.sleep(8)
    send(kafka_bootstrap, topics.input, [_cancel(m) for m in doomed[: CANCELLED // 2]])
    before = _partition_rows(urls[0], MOVED)
    started = time.time()
    command = subprocess.Popen(
        [sys.executable, "-m", "chronos", "shards", "move", str(MOVED), "--to", str(TO)],
        env=child_environment(as_environment(cluster.settings())),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    send(kafka_bootstrap, topics.input, [_cancel(m) for m in doomed[CANCELLED // 2 :]])
    output, _ = command.communicate(timeout=120)
    ended = time.time()
    left_behind = _partition_rows(urls[0], MOVED)
    moved_rows = _partition_rows(urls[TO], MOVED)
    time.sleep(10)
    messages = load.stop()
    last_doomed = max(m.expectation.deadline_ms or 0 for m in doomed) / 1000
    time.sleep(max(0.0, last_doomed + 3 - time.time()))  # past the cancelled ones' deadlines
    report = cluster.check(expectations(messages), timeout=90, quiet=3.0)
    crashed = [n.name for n in nodes if not n.alive()]
    assert command.returncode == 0, output
    assert not crashed, f"nodes exited: {crashed}\n{cluster.logs()}"
    drained = cluster.table.wait(lambda _: all(_rows(url) == 0 for url in urls), timeout=30)

    partition_of = {track: acked[0] for track, acked in load.acked.items()}
    others_late: list[float] = []
    moved_recovery: list[float] = []
    for message in messages:
        deadline_ms = message.expectation.deadline_ms
        if deadline_ms is None or message.track not in report.fired_at:
            continue
        if not started * 1000 <= deadline_ms <= ended * 1000:
            continue
        fired_ms = report.fired_at[message.track]
        if partition_of.get(message.track) == MOVED:
            moved_recovery.append(fired_ms / 1000 - ended)
        else:
            others_late.append(fired_ms - deadline_ms)
    others_p99 = statistics.quantiles(others_late, n=100)[98] if len(others_late) > 1 else 0.0
    recovery = max(moved_recovery, default=0.0)
    record_result(
        ScenarioResult.of(
            "29-partition-move",
            "a partition moved to another shard under load",
            report,
            max(0.0, recovery),
            held_s=round(ended - started, 2),
            rows_before=before,
            rows_moved=moved_rows,
            others_due_while_moving=len(others_late),
            others_p99_ms=round(others_p99),
            moved_due_while_held=len(moved_recovery),
        )
    )
    summary = (
        f"{report.summary()}; moved in {ended - started:.1f} s ({before} rows of partition "
        f"{MOVED} before, {moved_rows} in shard {TO} after, {left_behind} left behind); others "
        f"due meanwhile {len(others_late)}, p99 {others_p99:.0f} ms; the moved partition's "
        f"{len(moved_recovery)}, last {recovery:.1f} s after the move\n{output}"
    )
    assert report.lost == [] and report.misrouted == [], summary
    assert report.early == {} and report.duplicates == 0, summary
    assert report.unknown == 0, f"cancelled messages fired: {summary}"
    assert left_behind == 0 and moved_rows > 100 and before > 100, summary
    assert f"partition {MOVED} moved to shard {TO}" in output, summary
    assert others_p99 <= ON_TIME_MS, summary
    assert recovery <= RECOVERY_S, summary
    assert drained, [_rows(url) for url in urls]
