"""Scenario 17 — ``chronosTopic`` naming a topic that matches ``CHRONOS_ALLOWED_TOPICS=*`` but can
never be written, among valid messages, through two real node processes.

The bad records name ``.``, ``..``, a 300-character name, an internal topic, the input topic and
the dead-letter topic; some are due in seconds, some had lapsed on arrival (intake publishes
those itself). A topic that does not exist, or that the node has no ACL for, is not among them
yet (the imitation the suite ran on created every topic it was asked for and had no authorizer;
the embedded Apache Kafka creates none, but has no authorizer either): the refusal those get
(unknown topic, authorization failed) is classified with the others in
``tests/unit/kafka/test_publisher.py``.

Pass: every valid message fires, on time, as if the bad ones were not there (nothing waits for
them: not the other records of a batch, not the partition, not the next batch); each bad record
reaches the dead-letter topic with a reason within ``DEAD_LETTER_WITHIN_S``; lost 0, nothing
early; the nodes stay up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from chronos.protocol import TOPIC_HEADER
from tests.support import Topics
from tests.support.checker import (
    Expectation,
    Outgoing,
    ScenarioResult,
    expectations,
    record_result,
    scheduled,
    send,
)
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

VALID = 120
DEAD_LETTER_WITHIN_S = 60.0
# The valid messages' lateness bound: what a fault-free run shows (tens of ms), with room for
# this shared machine; a valid message held up behind a bad one is seconds late.
MAX_VALID_LATENESS_MS = 1500


def aimed_at(topic: str, deadline: datetime) -> Outgoing:
    message = scheduled(deadline, extra_headers=[(TOPIC_HEADER, topic.encode())])
    return dataclasses.replace(
        message, expectation=Expectation(message.expectation.deadline_ms, dead_letter=True)
    )


def test_records_aimed_at_unwritable_topics_are_dead_lettered_and_hold_nothing_up(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster(allowed_topics="*")
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    unwritable = {
        "dot": ".",
        "dots": "..",
        "long": "t" * 300,
        "internal": "__consumer_offsets",
        "input": topics.input,
        "dead-letter": topics.dead_letter,
    }
    now = datetime.now(UTC)
    bad = [aimed_at(t, now + timedelta(seconds=3)) for t in unwritable.values()]
    bad += [aimed_at(unwritable[k], now - timedelta(seconds=5)) for k in ("dots", "internal")]
    valid = [scheduled(now + timedelta(seconds=3 + i / 40)) for i in range(VALID)]
    # Interleaved: each bad record shares batches and partitions with valid ones.
    every = VALID // len(bad)
    messages: list[Outgoing] = []
    for i, message in enumerate(valid):
        messages.append(message)
        if i % every == 0 and i // every < len(bad):
            messages.append(bad[i // every])
    send(kafka_bootstrap, topics.input, messages)
    report = cluster.check(expectations(messages), timeout=DEAD_LETTER_WITHIN_S, quiet=3.0)
    valid_tracks = {m.track for m in valid}
    lateness = {
        t: report.fired_at[t] - m.expectation.deadline_ms
        for m in valid
        if (t := m.track) in report.fired_at and m.expectation.deadline_ms is not None
    }
    worst = max(lateness.values(), default=None)
    record_result(
        ScenarioResult.of(
            "17-unwritable-topics",
            f"{len(bad)} records aimed at topics that can never be written, among {VALID}",
            report,
            None,
            valid_fired=len(valid_tracks & set(report.fired_at)),
            bad_dead_lettered=sum(1 for m in bad if m.track in report.dead_lettered),
            worst_valid_lateness_ms=worst,
            reasons=sorted({str(r) for r in report.dead_lettered.values()})[:10],
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {} and report.duplicated == {}, report.summary()
    for message in bad:
        reason = report.dead_lettered.get(message.track)
        assert reason, f"{message.headers[-1]}: dead-lettered without a reason"
    assert worst is not None and worst <= MAX_VALID_LATENESS_MS, (
        f"a valid message fired {worst} ms late behind the bad ones"
    )
    assert all(n.alive() for n in nodes), cluster.logs()
