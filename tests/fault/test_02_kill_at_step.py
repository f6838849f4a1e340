"""Scenario 2 — ``kill -9`` of a node at each step boundary, while a peer keeps running.

The victim runs with ``CHRONOS_FAULT_KILL_AT=<point>:1`` (chronos/runtime/faults.py): it SIGKILLs
itself
the first time it passes the point. Right after its death the test snapshots the rows it still
holds claimed ("stranded": exactly its in-flight batch).

Pass, for every point:

* lost 0 and nothing early;
* duplicates only where the step allows them, at most the victim's in-flight batch:
  - ``after_claim``  (claim committed, nothing published): none;
  - ``after_produce`` (handed to the producer, no report): at most the stranded rows;
  - ``after_report`` (delivered, not deleted): at most the stranded rows — and at least one,
    since the delivered batch is fired again (proof the kill hit the window);
  - ``after_enqueue`` (batch committed to Postgres, offsets not stored): the stranded rows and
    the records of the victim's partitions past the group's committed offset at its death
    (``tests/fault/bounds.py``, ``in_flight``), re-published when the survivor reads them again
    after the consumer session (20 s), once their messages fired; the replay itself is
    idempotent on the id. (The bound was one consumed batch, tuned to 50: at the default 2,000
    it would bound nothing.) So that this point strands claims too, the victim is made to
    claim first: a first wave goes to the survivor's partitions only (the table is shared),
    and the victim's first enqueue, of a second wave sent to its own partitions once it holds
    claims, is its death;
* every stranded row (there must be some, at every point) is taken over when it is due: at its
  claim + hold time, or earlier when the victim's last heartbeat + the liveness window comes
  first (the leader's fast takeover); it fires again no earlier than that (no premature
  take-over) and no later than that + failure-detection interval + poll interval
  (+ ``SLACK_MS`` for a shared, noisy CI machine);
* no message later than a takeover (``takeover_s`` + the lookahead a row is claimed ahead by),
  at ``after_enqueue`` the input failover (``input_failover_s``: a record the victim had not
  consumed waits for its partition to move); there was no bound but the stranded rows';
* the survivor stays up and the table ends empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import pytest

from tests.fault.bounds import committed_offsets, in_flight, input_failover_s, takeover_s
from tests.support import Topics
from tests.support.checker import (
    ScenarioResult,
    due_in,
    expectations,
    record_result,
    send,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

SLACK_MS = 1500

DESCRIPTION = {
    "after_claim": "SIGKILL after the claim commits",
    "after_produce": "SIGKILL after produce, before the delivery report",
    "after_report": "SIGKILL after the report, before the delete",
    "after_enqueue": "SIGKILL after the insert commits, before the offset is stored",
}


@pytest.mark.parametrize("point", list(DESCRIPTION))
def test_kill_at_step_boundary(
    point: str, make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    survivor = cluster.start("survivor")
    victim = cluster.start("victim", env={"CHRONOS_FAULT_KILL_AT": f"{point}:1"})
    cluster.wait_ready([survivor, victim])
    hold = cluster.overrides["hold_time_ms"]
    detection = cluster.overrides["failure_detection_interval_ms"]
    poll = cluster.overrides["poll_interval_ms"]

    # 400 messages due over 2..6 s: both nodes consume (keys spread them over the partitions)
    # and both claim.
    messages = [due_in(2 + i / 100) for i in range(400)]
    where: dict[str, tuple[int, int, float]] = {}
    if point != "after_enqueue":
        send(kafka_bootstrap, topics.input, messages)
    else:
        mine = sorted(p for t, p in victim.assignment() if t == topics.input)
        theirs = sorted(set(range(topics.partitions)) - set(mine))
        for i, partition in enumerate(theirs):
            send(kafka_bootstrap, topics.input, messages[i :: len(theirs)], partition=partition)
        assert cluster.table.wait(lambda t: t.claimed(victim.node_id) > 0, timeout=15), (
            "the victim claimed none of the survivor's rows"
        )
        second = [due_in(2 + i / 100) for i in range(100)]
        for i, partition in enumerate(mine):
            batch = second[i :: len(mine)]
            offsets = send(kafka_bootstrap, topics.input, batch, partition=partition)
            where.update({m.track: (p, o, 0.0) for m, (p, o) in zip(batch, offsets, strict=True)})
        messages += second

    assert victim.wait_exit(30) == -9, f"the victim did not hit {point}:\n{victim.tail()}"
    killed_at = time.time()
    stranded: dict[str, datetime] = cluster.table.claims_of(victim.node_id)
    committed = committed_offsets(cluster)  # the victim commits nothing more
    replayed = in_flight(where, committed, range(topics.partitions), killed_at)
    last_beat: datetime = cluster.table.scalar(
        "SELECT heartbeat_at FROM chronos_nodes WHERE node_id = %s::uuid", (victim.node_id,)
    )
    window = cluster.overrides["liveness_window_ms"]

    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=15), (
        f"{cluster.table.count()} rows left, {cluster.table.claimed()} claimed"
    )

    # Recovery of the stranded rows: their last copy (the re-fire by the survivor).
    last_copy: dict[str, int] = {}
    for obs in report.observations:
        if obs.track in stranded and not obs.dead_letter:
            last_copy[obs.track] = max(obs.timestamp_ms, last_copy.get(obs.track, 0))
    takeover_ms = {
        track: last_copy[track] - stranded[track].timestamp() * 1000 for track in last_copy
    }
    if point == "after_enqueue":
        # The victim's partitions are replayed by the survivor once the group notices the
        # death (session timeout): recovery = the last message of the run.
        recovery_s = max(report.fired_at.values()) / 1000 - killed_at
    elif last_copy:
        recovery_s = max(last_copy.values()) / 1000 - killed_at
    else:
        recovery_s = None

    allowed = {
        "after_claim": 0,
        "after_produce": len(stranded),
        "after_report": len(stranded),
        "after_enqueue": len(stranded) + len(replayed),
    }[point]
    record_result(
        ScenarioResult.of(
            f"02-kill-{point.replace('_', '-')}",
            DESCRIPTION[point],
            report,
            recovery_s,
            stranded=len(stranded),
            allowed_duplicates=allowed,
            takeover_ms_max=max(takeover_ms.values(), default=None),
        )
    )

    assert report.lost == [], report.summary()
    assert report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicates <= allowed, (
        f"{report.duplicates} duplicates, at most {allowed} allowed at {point} "
        f"({len(stranded)} stranded): {report.summary()}"
    )
    if point == "after_report":
        assert report.duplicates >= 1, "the kill did not hit a delivered, undeleted batch"
    assert stranded, f"the victim held no claim when it died at {point}"
    unexplained = {t for t in report.duplicated if t not in set(stranded) | replayed}
    assert not unexplained, f"copies of rows neither stranded nor replayed: {unexplained}"
    assert set(last_copy) == set(stranded), "some stranded rows never fired"
    # When each stranded row became due for a takeover, in ms after its claim: the hold time,
    # or the victim's heartbeat lapsing (last heartbeat + window) if that came first.
    lapsed_at_ms = last_beat.timestamp() * 1000 + window
    due_ms = {t: min(hold, lapsed_at_ms - stranded[t].timestamp() * 1000) for t in takeover_ms}
    early_takeover = {t: ms for t, ms in takeover_ms.items() if ms < due_ms[t] - 5}
    assert not early_takeover, (
        f"stranded rows taken over before the hold time or the victim's heartbeat lapsed: "
        f"{early_takeover} (due at {due_ms})"
    )
    slack = detection + poll + SLACK_MS
    slow = {t: round(ms) for t, ms in takeover_ms.items() if ms > due_ms[t] + slack}
    assert not slow, f"stranded rows fired later than due + {slack} ms: {slow} (due {due_ms})"
    # Every message: a stranded row at most its takeover late (claimed at most the lookahead
    # before its deadline); at after_enqueue a record of the victim's partitions it had not
    # consumed yet waits for the input failover.
    settings = survivor.settings
    late_bound_s = takeover_s(settings) + settings.lookahead_ms / 1000
    if point == "after_enqueue":
        late_bound_s = max(late_bound_s, input_failover_s(settings))
    assert report.late.max <= late_bound_s * 1000, f"{report.summary()} (bound {late_bound_s} s)"
    assert survivor.alive(), survivor.tail()
