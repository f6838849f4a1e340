"""Scenario 9 — a record the broker will not accept: larger than the output topic allows.

Chronos retries a permanent refusal ``CHRONOS_MAX_PUBLISH_ATTEMPTS`` times, then publishes the
message to the dead-letter topic with the error, through the same producer. Two cases:

* **the dead-letter topic takes larger records** (real Kafka: the output topic's
  ``max.message.bytes`` below the dead-letter topic's). The imitation the suite ran on did not
  enforce a topic's ``max.message.bytes`` (Apache Kafka does: the injection could now give way
  to the topic setting), so the node process gets the refusal injected at its producer
  (``tests.fault.injections.refuse_large_output``): records over 50 kB for the output topic
  fail with the broker's MSG_SIZE_TOO_LARGE, delivered as a report. Pass: the message is
  refused exactly ``max_publish_attempts`` times, then dead-lettered with the reason and its
  original key, value and headers; its row is gone; the other messages fire on time (none over
  ``ON_TIME_MS``), once; no further attempt. Both run at the shipped ``max_publish_attempts``.
* **no topic takes it** (the producer's own ``message.max.bytes`` below the record, as with a
  broker-wide limit): the dead-letter publish is refused too. Pass (what the design can do):
  nothing is lost — the row stays in the table, parked after ``2 x max_publish_attempts``
  refusals with the broker's error in ``last_error`` and counted by the parked gauge; the
  attempts stop there (no endless reset loop); the other messages fire on time, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from chronos.config.settings import OPTIONS_BY_NAME
from chronos.kafka.clients import DELIVERY_TOO_LARGE
from chronos.protocol import DEAD_LETTER_CODE_HEADER, DEAD_LETTER_SOURCE_HEADER
from tests.fault.bounds import ON_TIME_MS
from tests.fault.injections import OUTPUT_MAX_BYTES_ENV, REFUSAL_MARK, REFUSE_LARGE_OUTPUT
from tests.support import Topics
from tests.support.checker import (
    Expectation,
    ScenarioResult,
    due_in,
    expectations,
    header,
    record_result,
    send,
)
from tests.support.cluster import Cluster

pytestmark = pytest.mark.integration

ATTEMPTS = OPTIONS_BY_NAME["max_publish_attempts"].default  # what users run
BIG = bytes(range(256)) * 400  # 102,400 bytes


def test_oversized_record_is_dead_lettered_when_the_dead_letter_topic_takes_it(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    node = cluster.start(
        env={
            "CHRONOS_TEST_INJECT": REFUSE_LARGE_OUTPUT,
            OUTPUT_MAX_BYTES_ENV: "50000",
        }
    )
    cluster.wait_ready()
    big = due_in(2, value=BIG, key=b"big-key", extra_headers=[("h", b"\x00\xff")])
    others = [due_in(2 + i / 100) for i in range(100)]
    send(kafka_bootstrap, topics.input, [big, *others])
    sent = expectations(others)
    sent[big.track] = Expectation(big.expectation.deadline_ms, dead_letter=True)

    report = cluster.check(sent, timeout=30, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=10), cluster.table.count()
    time.sleep(1.0)
    refusals = sum(REFUSAL_MARK in line for line in node.lines())
    dead = [o for o in report.observations if o.dead_letter and o.track == big.track]
    record_result(
        ScenarioResult.of(
            "09-oversized-dead-lettered",
            "record over the output topic's limit (dead-letter topic takes it)",
            report,
            None,
            refusals=refusals,
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {} and report.duplicated == {}, report.summary()
    assert refusals == ATTEMPTS, f"refused {refusals} times, expected {ATTEMPTS}"
    (record,) = dead
    reason = record.reason or ""
    assert header(record.headers, DEAD_LETTER_CODE_HEADER) == b"publish_failed"
    assert DELIVERY_TOO_LARGE in reason, reason  # Chronos's words for the broker's refusal
    assert f"{ATTEMPTS} times" in reason, reason
    assert (record.key, record.value) == (big.key, big.value)
    assert record.headers[: len(big.relayed_headers)] == big.relayed_headers
    assert header(record.headers, DEAD_LETTER_SOURCE_HEADER) is not None
    assert report.late.max <= ON_TIME_MS, f"other messages delayed: {report.late}"
    assert node.alive()


def test_record_no_topic_accepts_is_parked_not_lost(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster(producer_properties={"message.max.bytes": "50000"})
    node = cluster.start()
    cluster.wait_ready()
    big = due_in(2, value=BIG, key=b"big-key")
    others = [due_in(2 + i / 100) for i in range(100)]
    send(kafka_bootstrap, topics.input, [big, *others])

    report = cluster.check(expectations(others), timeout=30, quiet=2.0)
    park = 2 * ATTEMPTS
    parked = "SELECT attempts, last_error, readied_at FROM chronos_messages WHERE id = %s"
    assert cluster.table.wait(
        lambda t: (r := t.rows(parked, (big.track,))) != [] and r[0][0] >= park, timeout=20
    ), cluster.table.rows(parked, (big.track,))
    # The failed publishes counted by the node (its log lines of them are throttled).
    publish_errors = 'chronos_publish_errors_total{topic_kind="output"}'
    failures_then = node.metric(publish_errors)
    time.sleep(2.0)  # parked: no further attempt, no reset loop
    ((attempts, last_error, readied_at),) = cluster.table.rows(parked, (big.track,))
    failures_after = node.metric(publish_errors) - failures_then
    gauge_ok = cluster.table.wait(
        lambda t: node.metric("chronos_parked_messages") == 1, timeout=8, every=0.5
    )
    result = ScenarioResult.of(
        "09-oversized-parked",
        "record over every topic's limit (producer message.max.bytes)",
        report,
        None,
        parked=1,
        attempts=attempts,
        last_error=last_error,
        dead_lettered_big=big.track in report.dead_lettered,
    )
    result.sent += 1  # the oversized one: kept in the table, parked (checked below)
    record_result(result)
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {} and report.duplicated == {}, report.summary()
    assert report.late.max <= ON_TIME_MS, f"other messages delayed: {report.late}"
    assert attempts == park, f"{attempts} attempts, parked at {park}"
    assert readied_at is None, "the parked row is still claimed"
    assert last_error and last_error.startswith(DELIVERY_TOO_LARGE), last_error
    assert failures_then >= park, f"only {failures_then} failed publishes counted"
    assert failures_after == 0, f"{failures_after} more failed publishes after parking"
    assert cluster.table.count() == 1, "the oversized message was dropped"
    assert gauge_ok, "the parked gauge does not show it"
    assert node.alive()
