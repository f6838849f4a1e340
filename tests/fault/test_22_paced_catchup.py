"""Scenario 22 - paced catch-up after an outage of every node: ``BACKLOG`` messages come due while
all nodes are stopped, and a stream of ``STREAM`` msg/s due 2-5 s ahead keeps arriving; the nodes
restart with ``CHRONOS_CATCHUP_RATE``.

Pass: the overdue backlog (with the stream's records that came due while every node was away:
intake stores and paces them too) fires at the catch-up rate ±10 % over the whole drain, and at most
+25 % over any 5-s window (a node that starts before its peer's first heartbeat takes the whole
rate until it reads the live nodes again, a second later); the stream sent once the nodes are
back fires on time (p99 lateness ≤ 200 ms) while the backlog drains; no message later than the
return + its turn at 0.9 x the rate (+ margin); lost 0, nothing early, no copy. CI runs it scaled
down (6,000 at 500 msg/s, two nodes); ``CHRONOS_FAULT_LONG=1`` runs the issue's size (60,000 at
2,000 msg/s after 60 s away, 100 msg/s of stream).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import pytest

from tests.fault.bounds import MARGIN_S
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.checker.sending import send
from tests.support.checker.sent import due_in
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NODES = 2
WINDOW_S = 5.0


def commit_after(bootstrap: str, group: str, topic: str, where: Sequence[tuple[int, int]]) -> None:
    """Commit ``group``'s offsets just after the records at ``where`` (partition, offset)."""
    from confluent_kafka import Consumer, TopicPartition

    ends: dict[int, int] = {}
    for partition, offset in where:
        ends[partition] = max(ends.get(partition, -1), offset + 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in ends.items()], asynchronous=False
        )
    finally:
        consumer.close()


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def test_the_overdue_backlog_fires_at_the_catchup_rate_and_the_stream_on_time(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics, long_run: bool
) -> None:
    backlog_size, rate, stream_rate, away_s = (
        (60_000, 2_000, 100, 60.0) if long_run else (6_000, 500, 100, 6.0)
    )
    cluster = make_cluster(catchup_rate=rate)
    cluster.start_many(NODES)
    cluster.wait_ready()
    lead_s = 10.0 if not long_run else 60.0  # time to send and store the backlog (~2 s)
    backlog = [due_in(lead_s) for _ in range(backlog_size)]
    where = send(kafka_bootstrap, topics.input, backlog, timeout=120)
    stored = cluster.table.wait(lambda t: t.count() >= backlog_size, timeout=lead_s - 4)
    assert stored, f"only {cluster.table.count()} of {backlog_size} stored before the deadline"
    for node in cluster.live():
        assert node.terminate() == 0
    load = Load(kafka_bootstrap, topics.input, rate=stream_rate, delay=(2.0, 5.0)).start()
    due_at = backlog[-1].expectation.deadline_ms or 0
    time.sleep(max(0.0, due_at / 1000 + away_s - time.time()))  # all due, the nodes away
    # A consumer group of their own, from where the first one stopped (after the backlog's
    # records): the embedded broker was seen not to assign the partitions of a group every
    # member had left within a minute.
    group = f"{topics.input}-after-outage"
    commit_after(kafka_bootstrap, group, topics.input, where)
    cluster.start_many(NODES, consumer_group=group)
    cluster.wait_ready()
    back_ms = time.time() * 1000
    time.sleep(backlog_size / rate + 5)  # the drain, with the stream arriving throughout
    stream = load.stop()
    report = cluster.check(expectations(backlog + stream), timeout=120, quiet=2.0)

    # The catch-up paces every message overdue by more than CHRONOS_CATCHUP_AFTER_MS, whether it
    # was stored before the outage (the backlog) or read late from the input topic (the stream
    # sent while every node was away): intake stores those too, and the claims pace them.
    # A stream record read less than CHRONOS_CATCHUP_AFTER_MS after its deadline is published at
    # once (not overdue enough to be paced): those that fired more than that late are the paced.
    paced = backlog + [
        m
        for m in stream
        if m.track in report.fired_at
        and (m.expectation.deadline_ms or 0) < back_ms
        and report.fired_at[m.track] - (m.expectation.deadline_ms or 0) > 1_000
    ]
    fired = sorted(report.fired_at[m.track] for m in paced if m.track in report.fired_at)
    drain_s = (fired[-1] - fired[0]) / 1000 if len(fired) > 1 else 0.0
    overall = len(fired) / drain_s if drain_s else float("inf")
    windows = [
        sum(1 for f in fired if start <= f < start + WINDOW_S * 1000) / WINDOW_S
        for start in range(int(fired[0]), int(fired[-1] - WINDOW_S * 1000) + 1, 1000)
    ]
    on_time = [
        report.fired_at[m.track] - (m.expectation.deadline_ms or 0)
        for m in stream
        if m.track in report.fired_at and (m.expectation.deadline_ms or 0) > back_ms + 1_000
    ]
    p99 = _quantile(on_time, 0.99)
    record_result(
        ScenarioResult.of(
            "22-paced-catchup",
            f"{backlog_size} overdue after every node was away, paced at {rate} msg/s, "
            f"with {stream_rate} msg/s due 2-5 s ahead",
            report,
            p99 / 1000,
            backlog_rate=round(overall, 1),
            busiest_window_rate=round(max(windows, default=0.0), 1),
            stream_p99_ms=round(p99, 1),
            stream_measured=len(on_time),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.duplicates == 0 and report.early == {}, report.summary()
    assert len(fired) == len(paced), report.summary()
    assert 0.9 * rate <= overall <= 1.1 * rate, f"the overdue fired at {overall:.0f} msg/s"
    assert max(windows, default=0.0) <= 1.25 * rate, f"busiest {WINDOW_S} s: {max(windows)} msg/s"
    assert len(on_time) > stream_rate * 5, len(on_time)
    assert p99 <= 200, f"the stream's p99 lateness is {p99:.0f} ms while the backlog drains"
    # The overdue wait for the return, then for their turn at no less than 0.9 x the rate (the
    # bound above): no message later than that.
    first_due = min(m.expectation.deadline_ms or back_ms for m in paced)
    late_bound_ms = back_ms - first_due + (len(paced) / (0.9 * rate) + MARGIN_S) * 1000
    assert report.late.max <= late_bound_ms, f"{report.summary()} (bound {late_bound_ms:.0f})"
