"""Scenario 10 — nodes whose wall clock is 10 minutes off.

The skew is an injected clock (``tests.fault.injections.skew_wall_clock``): inside the node
process, before Chronos is imported, ``time.time``, ``time.time_ns`` and ``datetime.now`` are
shifted by +/-10 minutes; the monotonic clock stays true. libfaketime cannot be used on a node:
librdkafka's timed waits take absolute deadlines from the faked clock that glibc's C11
``cnd_timedwait`` passes to the kernel unfaked, so with +10 min every wait of the Kafka client
lasts ten minutes longer (the node hangs at start-up) and with -10 min none waits at all.
librdkafka's record timestamps therefore stay true; every Chronos decision made in Python sees
the skewed clock.

Chronos promises one clock: every deadline, claim and hold-time comparison uses Postgres's
``now()``, and the in-memory timers count down on the monotonic clock. Two skewed nodes (both
+10 min, or both -10 min) run a load; one of them is killed right after a claim (a fault point),
so the other must take its rows over on time.

Pass: nothing early; lost 0; no duplicate; no claim reset before it was due — the only
``suspected failure`` resets are of the killed node's rows, each re-fired no earlier than when it
became due for a takeover (its claim + hold, or the victim's last heartbeat + the liveness
window if that came first) and no later than that + detection interval + poll interval
(+ ``SLACK_MS``), measured on the database clock. Lateness otherwise (``tests/fault/bounds.py``):
a message of the victim's input partitions at most the input failover (consumer session 20 s +
5 s) less its delay (the victim may die before it consumed them), any other at most
``ON_TIME_MS``. (The bound was a flat minute: a node late by its skew's tenth passed.)

A second test checks the configurable maximum delay on such nodes: a message due in 2 s must
be scheduled and one due in 5 minutes dead-lettered (max delay 1 minute), whatever the node's
clock says; the scheduled ones fire on time (``ON_TIME_MS``) and once.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import pytest

from tests.fault.bounds import ON_TIME_MS, input_failover_s, lateness
from tests.fault.injections import CLOCK_OFFSET_ENV, SKEW_WALL_CLOCK
from tests.support import Topics
from tests.support.checker import (
    Expectation,
    ScenarioResult,
    due_in,
    expectations,
    record_result,
    send,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

SKEW_S = 600
SLACK_MS = 1500


def skewed(offset_s: int) -> dict[str, str]:
    """Environment of a node whose wall clock is ``offset_s`` seconds off."""
    return {"CHRONOS_TEST_INJECT": SKEW_WALL_CLOCK, CLOCK_OFFSET_ENV: str(offset_s)}


@pytest.mark.parametrize("skew", [SKEW_S, -SKEW_S], ids=["ahead", "behind"])
def test_node_clock_ten_minutes_off(
    skew: int,
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    cluster = make_cluster()
    survivor = cluster.start("survivor", env=skewed(skew))
    victim = cluster.start("victim", env={**skewed(skew), "CHRONOS_FAULT_KILL_AT": "after_claim:3"})
    cluster.wait_ready()
    hold = cluster.overrides["hold_time_ms"]
    detection = cluster.overrides["failure_detection_interval_ms"]
    poll = cluster.overrides["poll_interval_ms"]
    victim_partitions = {p for t, p in victim.assignment() if t == topics.input}

    messages = [due_in(1.5 + i / 100) for i in range(500)]  # 1.5..6.5 s
    offsets = send(kafka_bootstrap, topics.input, messages)
    where = dict(zip([m.track for m in messages], offsets, strict=True))
    assert victim.wait_exit(30) == -9, f"the victim did not hit its fault point:\n{victim.tail()}"
    stranded: dict[str, datetime] = cluster.table.claims_of(victim.node_id)
    last_beat: datetime = cluster.table.scalar(
        "SELECT heartbeat_at FROM chronos_nodes WHERE node_id = %s::uuid", (victim.node_id,)
    )
    window = cluster.overrides["liveness_window_ms"]

    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=15), cluster.table.count()
    reset = {e["message_id"] for e in survivor.events("suspected_failure")}
    takeover = {
        t: report.fired_at[t] - stranded[t].timestamp() * 1000
        for t in stranded
        if t in report.fired_at
    }
    name = "ahead" if skew > 0 else "behind"
    record_result(
        ScenarioResult.of(
            f"10-clock-{name}",
            f"node clocks {abs(skew) // 60} min {name}, one node SIGKILLed",
            report,
            max(takeover.values(), default=0) / 1000 or None,
            stranded=len(stranded),
            resets=len(reset),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicated == {}, report.summary()
    late = lateness(report, messages)
    moved = {t for t in late if where[t][0] in victim_partitions} - set(stranded)
    moved_bound = (input_failover_s(survivor.settings) - 1.5) * 1000
    late_moved = {t: ms for t, ms in late.items() if t in moved and ms > moved_bound}
    assert not late_moved, f"{len(late_moved)} over {moved_bound} ms: {late_moved}"
    others = {t: ms for t, ms in late.items() if t not in moved and t not in stranded}
    late_other = {t: ms for t, ms in others.items() if ms > ON_TIME_MS}
    assert not late_other, f"{len(late_other)} untouched messages over {ON_TIME_MS} ms late"
    assert stranded, "the victim held no claim when it died"
    assert reset == set(stranded), (
        f"resets of rows the victim did not hold: {sorted(reset - set(stranded))[:5]}; "
        f"stranded never reset: {sorted(set(stranded) - reset)[:5]}"
    )
    # Due for a takeover, in ms after the claim: the hold time, or the victim's heartbeat
    # lapsing (last heartbeat + window, database clock) if that came first.
    lapsed_at_ms = last_beat.timestamp() * 1000 + window
    due = {t: min(hold, lapsed_at_ms - stranded[t].timestamp() * 1000) for t in takeover}
    premature = {t: round(ms) for t, ms in takeover.items() if ms < due[t] - 5}
    assert not premature, f"taken over before it was due: {premature} (due {due})"
    slack = detection + poll + SLACK_MS
    slow = {t: round(ms) for t, ms in takeover.items() if ms > due[t] + slack}
    assert not slow, f"taken over later than due + {slack} ms: {slow} (due {due})"
    assert survivor.alive()


@pytest.mark.parametrize("skew", [SKEW_S, -SKEW_S], ids=["ahead", "behind"])
def test_max_delay_is_judged_on_the_database_clock(
    skew: int,
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    cluster = make_cluster(max_delay_ms=60_000)
    cluster.start(env=skewed(skew))
    cluster.wait_ready()
    soon = [due_in(2 + i / 100) for i in range(20)]
    far = due_in(300)
    send(kafka_bootstrap, topics.input, [*soon, far])
    sent = expectations(soon)
    sent[far.track] = Expectation(far.expectation.deadline_ms, dead_letter=True)
    report = cluster.check(sent, timeout=12, quiet=1.0)
    wrongly_rejected = [t for t in report.dead_lettered if t != far.track]
    assert not wrongly_rejected, (
        f"{len(wrongly_rejected)} messages due in 2 s dead-lettered by a node whose clock is "
        f"{skew:+d} s off: {report.dead_lettered[wrongly_rejected[0]]}"
    )
    assert far.track in report.dead_lettered, (
        f"a message due in 5 min was accepted with a 1 min maximum delay by a node whose clock "
        f"is {skew:+d} s off (still waiting in the table: {far.track in cluster.table.ids()})"
    )
    assert "max delay" in (report.dead_lettered[far.track] or ""), report.dead_lettered
    assert report.lost == [] and report.early == {}, report.summary()
    # No node dies here: every message on time, none twice (there was neither bound).
    assert report.late.max <= ON_TIME_MS and report.duplicates == 0, report.summary()
