"""Scenario 20 — ``kill -9`` of a node between publishing an occurrence of a series and advancing
its row to the next one, while a peer keeps running.

The victim runs with ``CHRONOS_FAULT_KILL_AT=after_report:1``: it dies the first time a batch of
deliveries is confirmed and not yet written back ("delete or advance"). Its claims stay in the
table, each series' row still at the occurrence it fired; the peer takes them over once the
victim's heartbeat lapsed (the liveness window, at the shipped defaults long before the hold
time) and fires that occurrence again, then advances.

Pass:

* every occurrence of every series is fired (none skipped: the period is longer than the
  takeover, so the missed-occurrence policy never applies) and none outside its series (nothing
  after ``chronosUntil``), none before its instant minus the timing advance;
* duplicates only of the occurrence the victim held: at most one per stranded row (and at least
  one, proof the kill hit the window), fired again within the takeover of the kill (window +
  detection + poll + margin: ``tests/fault/bounds.py``); the occurrences the victim held no
  later than the takeover, every other at most ``ON_TIME_MS`` after its instant (there was no
  bound on either);
* the series end at their ``chronosUntil``: the table ends empty; the survivor stays up.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from chronos.protocol import format_deadline, parse_deadline
from tests.fault.bounds import ON_TIME_MS, takeover_s
from tests.support import Topics
from tests.support.checker import ScenarioResult, record_result, send
from tests.support.checker.analysis import header
from tests.support.checker.reading import TopicReader
from tests.support.checker.sent import scheduled
from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

SERIES = 40
PERIOD_S = 8  # longer than a takeover (7.1 s at the defaults, asserted): nothing is missed
OCCURRENCES = 3  # start, start + 8 s, start + 16 s (= chronosUntil)
AT = "x-chronos-at"  # the relayed instant of each occurrence


def test_kill_between_publish_and_advance_repeats_only_that_occurrence(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster(relay_deadline_header=AT)
    survivor = cluster.start("survivor")
    victim = cluster.start("victim", env={"CHRONOS_FAULT_KILL_AT": "after_report:1"})
    cluster.wait_ready([survivor, victim])
    advance = cluster.overrides["timing_advance_ms"]
    takeover = takeover_s(survivor.settings)
    assert takeover < PERIOD_S, f"a takeover ({takeover} s) may outlast the period"

    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    expected: dict[tuple[str, str], int] = {}
    messages = []
    for i in range(SERIES):
        first = start + timedelta(milliseconds=25 * i)
        until = first + timedelta(seconds=PERIOD_S * (OCCURRENCES - 1))
        m = scheduled(
            first,
            extra_headers=[
                ("chronosEvery", f"PT{PERIOD_S}S".encode()),
                ("chronosUntil", format_deadline(until).encode()),
            ],
        )
        messages.append(m)
        for k in range(OCCURRENCES):
            expected[(m.track, format_deadline(first + timedelta(seconds=PERIOD_S * k)))] = 0
    send(kafka_bootstrap, topics.input, messages)

    assert victim.wait_exit(30) == -9, f"the victim did not hit after_report:\n{victim.tail()}"
    killed_at = time.time()
    stranded = cluster.table.claims_of(victim.node_id)

    with TopicReader(kafka_bootstrap, topics.output, topics.dead_letter) as reader:
        reader.read_until(
            lambda seen: (
                {(o.track, (header(o.headers, AT) or b"").decode()) for o in seen} >= set(expected)
            ),
            timeout=60,
            quiet=3.0,
        )
        observations = list(reader.observations)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=15), (
        f"{cluster.table.count()} rows left: the series did not end at chronosUntil"
    )

    fired = Counter((o.track or "", (header(o.headers, AT) or b"").decode()) for o in observations)
    missing = sorted(set(expected) - set(fired))
    unexpected = sorted(set(fired) - set(expected))
    duplicated = {occurrence: n - 1 for occurrence, n in fired.items() if n > 1}
    early = [
        o.track
        for o in observations
        if o.timestamp_ms
        < parse_deadline((header(o.headers, AT) or b"").decode()).timestamp() * 1000 - advance - 1
    ]
    stranded_tracks = {message_id for message_id in stranded}
    # Recovery: from the kill to the last re-fire of an occurrence the victim had delivered.
    refired = [
        o.timestamp_ms
        for o in observations
        if (o.track, (header(o.headers, AT) or b"").decode()) in duplicated
    ]
    recovery_s = max(refired) / 1000 - killed_at if refired else None
    late = {
        occurrence: o.timestamp_ms - parse_deadline(occurrence[1]).timestamp() * 1000
        for o in observations
        if (occurrence := (o.track or "", (header(o.headers, AT) or b"").decode())) in expected
        and occurrence not in duplicated
    }
    # The victim's claims fire again (or at all) after the takeover; every other occurrence on time.
    slow = {
        k: round(ms)
        for k, ms in late.items()
        if ms > (takeover * 1000 if k[0] in stranded else ON_TIME_MS)
    }
    record_result(
        ScenarioResult(
            "20-recurring-kill-after-report",
            "SIGKILL after an occurrence's report, before its row advances",
            len(expected),
            len(missing),
            sum(duplicated.values()),
            len(early),
            None if recovery_s is None else round(recovery_s, 2),
            {"series": SERIES, "stranded": len(stranded), "unexpected": len(unexpected)},
        )
    )

    assert missing == [], f"occurrences never fired (skipped): {missing[:5]}"
    assert unexpected == [], f"occurrences outside their series: {unexpected[:5]}"
    assert early == [], early
    assert stranded, "the victim held no claim when it died"
    assert duplicated, "the kill did not hit a delivered, unadvanced occurrence"
    assert all(n == 1 for n in duplicated.values()), duplicated
    assert {track for track, _ in duplicated} <= stranded_tracks, (duplicated, stranded_tracks)
    assert sum(duplicated.values()) <= len(stranded)
    assert recovery_s is not None and recovery_s <= takeover, f"re-fired {recovery_s} s after"
    assert not slow, f"{len(slow)} occurrences late (ms): {list(slow.items())[:5]}"
    assert survivor.alive(), survivor.tail()
