"""Scenario 15 — ``kill -9`` of a node at each step boundary while cancels and reschedules flow.

Produced with ``chronos.client`` (one key per id, so a schedule and its cancel or reschedule share
a partition and are read in order), to a victim (``CHRONOS_FAULT_KILL_AT=<point>:1``, see
tests/fault/test_02_kill_at_step.py) and a surviving peer:

* 300 plain schedules due in 2..5 s (they bring the victim to its fault point);
* 100 schedules due in 16 s, each followed by its cancel (at ``after_enqueue``: in the input
  failover + 6 s, 31 s at the defaults, since the victim's partitions are read again by the
  survivor only after its consumer session, 20 s);
* 100 schedules due 14 s after the cancelled ones with value ``old``, each followed by a
  reschedule due in 3..6 s with value ``new``.

"Durable before its claim" is read from the table, the only place a cancel takes effect: a
cancel is durable once its enqueue statement committed, which deletes the row and writes the
marker in ``chronos_cancels`` in one transaction. Snapshotted 4 s before the cancelled messages'
deadline (before any node may claim them: the claim takes rows due within the timing advance),
an id with a marker and no row can never fire again — a replayed schedule of it is dropped by the
marker. Every cancelled id should be in that set (asserted), so none of them may fire.

Pass, for every point: lost 0 and early 0 (the plain and the rescheduled messages, the latter
against their new deadline); no durably cancelled message fires; every copy of a rescheduled
message carries the new value; copies only of what scenario 2 allows at that step, by name, and no
more of them than it names (the victim's stranded claims, plus at ``after_enqueue`` the records
past the group's committed offsets at its death, which the survivor reads again:
``tests/fault/bounds.py``; it was one consumed batch, tuned to 50, which the default 2,000 would
make meaningless); no message later than the longer of a takeover (+ the lookahead) and the input
failover, 25 s at the defaults (there was no lateness bound).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer

from chronos import client
from tests.fault.bounds import copies_outside, input_failover_s, past_commit, takeover_s
from tests.support import Topics
from tests.support.checker import (
    TRACKING_HEADER,
    Expectation,
    ScenarioResult,
    new_track,
    record_result,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

PLAIN, CANCELLED, RESCHEDULED = 300, 100, 100
CANCEL_DUE_S = 16.0
DESCRIPTION = {
    "after_claim": "SIGKILL after the claim commits, cancels and reschedules flowing",
    "after_produce": "SIGKILL after produce, cancels and reschedules flowing",
    "after_report": "SIGKILL after the report, cancels and reschedules flowing",
    "after_enqueue": "SIGKILL after the insert commits, cancels and reschedules flowing",
}


def _at(seconds: float) -> datetime:
    """now + seconds, truncated to whole milliseconds (what the client sends)."""
    when = datetime.now(UTC) + timedelta(seconds=seconds)
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


@pytest.mark.parametrize("point", list(DESCRIPTION))
def test_kill_at_step_while_cancels_and_reschedules_flow(
    point: str, make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    survivor = cluster.start("survivor")
    victim = cluster.start("victim", env={"CHRONOS_FAULT_KILL_AT": f"{point}:1"})
    cluster.wait_ready([survivor, victim])

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5, "acks": "all"})
    expected: dict[str, Expectation] = {}
    cancelled: set[str] = set()
    rescheduled: set[str] = set()

    def tracked(track: str) -> list[tuple[str, bytes]]:
        return [(TRACKING_HEADER, track.encode())]

    for i in range(PLAIN):
        track, deadline = new_track("p"), _at(2 + i / 100)
        client.schedule(
            producer, value=b"value", key=track, deadline=deadline, message_id=track,
            headers=tracked(track), topic=topics.input,
        )  # fmt: skip
        expected[track] = Expectation(_ms(deadline))
    cancel_due_s = CANCEL_DUE_S
    if point == "after_enqueue":
        cancel_due_s = input_failover_s(survivor.settings) + 6
    cancel_deadline = _at(cancel_due_s)
    for _ in range(CANCELLED):
        track = new_track("c")
        client.schedule(
            producer, value=b"value", key=track, deadline=cancel_deadline, message_id=track,
            headers=tracked(track), topic=topics.input,
        )  # fmt: skip
        client.cancel(producer, track, key=track, topic=topics.input)
        cancelled.add(track)
    for i in range(RESCHEDULED):
        track, new_deadline = new_track("r"), _at(3 + i / 33)
        client.schedule(
            producer, value=b"old", key=track, deadline=_at(cancel_due_s + 14), message_id=track,
            headers=tracked(track), topic=topics.input,
        )  # fmt: skip
        client.reschedule(
            producer, message_id=track, value=b"new", key=track, deadline=new_deadline,
            headers=tracked(track), topic=topics.input,
        )  # fmt: skip
        expected[track] = Expectation(_ms(new_deadline))
        rescheduled.add(track)
    assert producer.flush(30) == 0

    assert victim.wait_exit(30) == -9, f"the victim did not hit {point}:\n{victim.tail()}"
    killed_at = time.time()
    stranded = cluster.table.claims_of(victim.node_id)
    replayed = past_commit(cluster) if point == "after_enqueue" else set()

    # Durable cancels, before any node may claim the cancelled messages.
    time.sleep(max(0.0, cancel_deadline.timestamp() - 4 - time.time()))
    assert time.time() < cancel_deadline.timestamp() - cluster.overrides["timing_advance_ms"] / 1000
    markers = {r[0] for r in cluster.table.rows("SELECT id FROM chronos_cancels")}
    rows = cluster.table.ids()
    durable = {t for t in cancelled if t in markers and t not in rows}
    assert durable == cancelled, f"{len(cancelled - durable)} cancels not durable 4 s before"

    # Everything else fires (due within 6 s; what the victim had not read, once the survivor
    # reads its partitions: the input failover); then the cancelled deadline passes (plus claim
    # and fire time). The cancelled ids are never seen, so the check always reads until its
    # timeout: no longer than that (it read for 30 s at least).
    until = max(cancel_deadline.timestamp() + 8, killed_at + input_failover_s(survivor.settings))
    report = cluster.check(
        {**expected, **{t: Expectation(_ms(cancel_deadline)) for t in cancelled}},
        timeout=until - time.time(),
        quiet=2.0,
    )
    fired_cancelled = sorted(t for t in durable if t in report.fired_at)
    lost = [t for t in report.lost if t not in cancelled]
    wrong_value = sorted(
        {o.track for o in report.observations if o.track in rescheduled and o.value != b"new"}
        - {None}
    )
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=15), (
        f"{cluster.table.count()} rows left, {cluster.table.claimed()} claimed"
    )
    last = [report.fired_at[t] for t in stranded if t in report.fired_at]
    recovery_s = max(last) / 1000 - killed_at if last else None
    if point == "after_enqueue":
        recovery_s = max(report.fired_at[t] for t in expected) / 1000 - killed_at
    may_copy: set[str] = {
        "after_claim": set(),
        "after_produce": set(stranded),
        "after_report": set(stranded),
        "after_enqueue": set(stranded) | replayed,
    }[point]
    allowed = len(may_copy)
    sent = len(expected) + len(cancelled)
    result = ScenarioResult.of(
        f"15-actions-kill-{point.replace('_', '-')}",
        DESCRIPTION[point],
        report,
        recovery_s,
        stranded=len(stranded),
        allowed_duplicates=allowed,
        cancelled=len(cancelled),
        durable_cancels=len(durable),
        fired_after_durable_cancel=len(fired_cancelled),
        rescheduled=len(rescheduled),
        wrong_value=len(wrong_value),
    )
    result.sent, result.lost = sent, len(lost)  # the cancelled ids are expected not to fire
    record_result(result)

    if point == "after_enqueue":  # the victim's firing may hold nothing: the replay is the point
        assert replayed, "the kill left no record past the group's commit: nothing replayed"
    else:
        assert stranded, f"the victim held no claim at {point}: nothing to take over"
    assert lost == [], report.summary()
    assert report.early == {}, report.summary()
    assert fired_cancelled == [], f"{len(fired_cancelled)} fired after a durable cancel"
    assert wrong_value == [], f"rescheduled messages fired with the old value: {wrong_value[:5]}"
    outside = copies_outside(report, may_copy)
    assert outside == {}, f"copies of rows neither stranded nor replayed at {point}: {outside}"
    assert report.duplicates <= allowed, (
        f"{report.duplicates} duplicates, at most {allowed} allowed at {point} "
        f"({len(stranded)} stranded): {report.summary()}"
    )
    # A stranded row waits for its takeover (claimed at most the lookahead ahead), a record the
    # victim had not read (the kill may come while the load is still produced) for the input
    # failover: no message later than the longer of the two.
    settings = survivor.settings
    late_bound_s = max(
        takeover_s(settings) + settings.lookahead_ms / 1000, input_failover_s(settings)
    )
    assert report.late.max <= late_bound_s * 1000, f"{report.summary()} (bound {late_bound_s} s)"
    assert survivor.alive(), survivor.tail()
