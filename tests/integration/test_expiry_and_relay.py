"""CHRONOS_MAX_LATENESS_MS against the real Postgres and broker: messages the cluster could not
fire in time (it was away) are dead-lettered with reason "expired" instead of fired stale, and so
are records that arrive already past the limit; messages within the limit fire as before.
And the opt-in headers a consumer deduplicates with (CHRONOS_RELAY_*_HEADER)."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from chronos.protocol import DEAD_LETTER_REASON_HEADER, MESSAGE_ID_HEADER, format_deadline
from tests.integration.nodes import (
    Nodes,
    chronos_record,
    headers_of,
    now,
    produce,
    read,
    rows,
)
from tests.support import Topics

pytestmark = pytest.mark.integration


def _header(record: object, name: str) -> bytes | None:
    return dict(record.headers() or []).get(name)  # type: ignore[attr-defined]


def test_messages_past_the_limit_are_dead_lettered_not_fired_stale(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    # Stored while the cluster was up, then it was away for an hour: rows an hour overdue, and
    # one only 5 s overdue (within the minute allowed).
    with psycopg.connect(nodes.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_key, message_value) VALUES "
            "('stale-1', now() - interval '1 hour', 'k', 'v1'), "
            "('stale-2', now() - interval '2 hours', 'k', 'v2'), "
            "('recent', now() - interval '5 seconds', 'k', 'v3')"
        )
    nodes.start(max_lateness_ms=60_000)
    # And a record that arrives already a day late (the late fast path).
    produce(
        kafka_bootstrap, topics.input, [chronos_record("arrived-late", now() - timedelta(days=1))]
    )

    out = read(kafka_bootstrap, topics.output, topics.partitions, 1)
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 3)

    assert [r.value() for r in out] == [b"v3"]
    sources = sorted((_header(r, "chronosDeadLetterSource") or b"").decode() for r in dead)
    stored = [s for s in sources if s.startswith("chronos/")]
    arrived = [s for s in sources if s.startswith(f"{topics.input}/")]  # topic/partition/offset
    assert (stored, len(arrived)) == (["chronos/stale-1", "chronos/stale-2"], 1), sources
    for record in dead:
        reason = _header(record, DEAD_LETTER_REASON_HEADER)
        assert reason is not None and reason.startswith(b"expired:"), reason
    late = [r for r in dead if _header(r, MESSAGE_ID_HEADER) == b"arrived-late"]
    assert len(late) == 1  # the input record itself, its headers kept
    assert rows(nodes.database_url) == []


def test_the_id_and_scheduled_instant_reach_the_consumer_when_asked(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start(relay_id_header="x-chronos-id", relay_deadline_header="x-chronos-scheduled-for")
    due = now() + timedelta(seconds=2)
    sent = [
        chronos_record("stored", due, after=[("h", b"1")]),
        chronos_record("on-arrival", now() - timedelta(seconds=1), after=[("h", b"2")]),
    ]
    produce(kafka_bootstrap, topics.input, sent)
    out = read(kafka_bootstrap, topics.output, topics.partitions, 2)
    by_id = {_header(r, "x-chronos-id"): r for r in out}
    assert set(by_id) == {b"stored", b"on-arrival"}
    stored = by_id[b"stored"]
    names = [pair[0] for pair in headers_of(stored)]
    assert names[-2:] == ["x-chronos-id", "x-chronos-scheduled-for"]  # after the message's own
    assert _header(stored, "x-chronos-scheduled-for") == format_deadline(due).encode()


def test_each_relayed_occurrence_of_a_series_is_its_own_pair(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    """Only the id header asked for: the occurrences of a series share the id, so each carries
    its scheduled instant beside it (chronosScheduledFor) — a consumer deduplicating on the
    relayed identity keeps every occurrence and drops only repeats of one."""
    nodes.start(relay_id_header="x-chronos-id")
    start = now() + timedelta(seconds=2)
    until = format_deadline(start + timedelta(seconds=1))
    series = chronos_record(
        "daily", start, after=[("chronosEvery", b"PT1S"), ("chronosUntil", until.encode())]
    )
    produce(kafka_bootstrap, topics.input, [series])
    out = read(kafka_bootstrap, topics.output, topics.partitions, 2)
    identities = {(_header(r, "x-chronos-id"), _header(r, "chronosScheduledFor")) for r in out}
    assert {i for i, _ in identities} == {b"daily"}
    assert len(identities) == 2, identities  # two occurrences, two identities
