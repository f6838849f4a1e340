"""Recurring messages against the real broker and Postgres: an ``every`` series fires on time at
each occurrence and stops at its ``chronosUntil`` and at a cancel; a cron series fires at a real
minute boundary and its row advances to the next one; series a year behind fire with the rest
of their claimed batch; ``chronosExpires`` dead-letters what would fire stale, stored or
arriving."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest

from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    Action,
    ScheduledMessage,
    format_deadline,
    parse_deadline,
)
from chronos.recurrence import Rule
from chronos.store import Outcome, PostgresStore
from tests.integration.nodes import (
    Nodes,
    Sent,
    chronos_record,
    fire_ms,
    now,
    produce,
    read,
    rows,
)
from tests.support import Topics
from tests.support.checker.analysis import Observation, header
from tests.support.checker.reading import TopicReader

pytestmark = pytest.mark.integration

AT = "x-scheduled-for"  # the relayed occurrence instant (CHRONOS_RELAY_DEADLINE_HEADER)


def _header(record: object, name: str) -> bytes | None:
    return dict(record.headers() or []).get(name)  # type: ignore[attr-defined]


def _series(message_id: str, start: datetime | None, **headers: str) -> Sent:
    names = {"every": "chronosEvery", "cron": "chronosCron", "until": "chronosUntil"}
    extra: list[tuple[str, bytes | None]] = [(names[k], v.encode()) for k, v in headers.items()]
    record = chronos_record(message_id, start or now(), after=extra)
    if start is None:  # no chronosDeadline: the rule says when the first occurrence is
        record.headers[:] = [h for h in record.headers if h[0] != "chronosDeadline"]
    return record


def _lateness_ms(record: object) -> int:
    scheduled = parse_deadline((_header(record, AT) or b"").decode())
    return fire_ms(record) - int(scheduled.timestamp() * 1000)  # type: ignore[arg-type]


def test_an_every_series_fires_each_occurrence_on_time_until_its_end_or_its_cancel(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    advance = 50
    nodes.start(relay_deadline_header=AT, timing_advance_ms=advance)
    start = parse_deadline(format_deadline(now() + timedelta(seconds=3)))  # as sent: ms
    until = start + timedelta(seconds=4)
    produce(
        kafka_bootstrap,
        topics.input,
        [
            _series("bounded", start, every="PT1S", until=format_deadline(until)),
            _series("cancelled", start, every="PT1S"),
        ],
    )

    # Cancel the open-ended one once its third occurrence is out (one reader, kept open: a
    # consumer made anew for each look may not fetch within its time on a busy machine).
    def third(seen: list[Observation]) -> bool:
        return sum(1 for o in seen if header(o.headers, "x-test-id") == b"cancelled") >= 3

    with TopicReader(kafka_bootstrap, topics.output, None) as reader:
        assert reader.read_until(third, timeout=30, quiet=0), "no third occurrence"
    cancel = chronos_record("cancelled", now(), after=[("chronosAction", b"cancel")])
    produce(kafka_bootstrap, topics.input, [cancel])
    cancelled_at = now()
    time.sleep(3)  # room for occurrences that must not come

    out = read(kafka_bootstrap, topics.output, topics.partitions, 8, settle=1.5)
    bounded = [r for r in out if _header(r, "x-test-id") == b"bounded"]
    cancelled = [r for r in out if _header(r, "x-test-id") == b"cancelled"]
    # Five occurrences (start + 0..4 s), each at its own instant, none twice, none after until.
    instants = sorted(parse_deadline((_header(r, AT) or b"").decode()) for r in bounded)
    assert instants == [start + timedelta(seconds=i) for i in range(5)], instants
    assert all(_header(r, "chronosEvery") is None for r in out)  # never relayed
    lateness = [_lateness_ms(r) for r in bounded + cancelled]
    assert min(lateness) >= -advance - 1, lateness  # never before deadline - advance
    assert max(lateness) < 500, lateness  # on time (a one-shot message's bound in this tier)
    # The cancel stopped the other series: an occurrence claimed when it arrived (claims run up
    # to the lookahead, 1 s, ahead) fires, and none after it; its row is gone.
    last = max(parse_deadline((_header(r, AT) or b"").decode()) for r in cancelled)
    assert len(cancelled) >= 3
    assert last <= cancelled_at + timedelta(seconds=1.1), (last, cancelled_at)
    assert len({_header(r, AT) for r in cancelled}) == len(cancelled)  # none twice
    assert rows(nodes.database_url) == []


def test_a_cron_series_fires_at_a_real_minute_boundary_and_advances(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start(relay_deadline_header=AT)
    produce(kafka_bootstrap, topics.input, [_series("minutely", None, cron="* * * * *")])
    out = read(kafka_bootstrap, topics.output, topics.partitions, 1, timeout=75, settle=0.5)
    assert len(out) == 1
    scheduled = parse_deadline((_header(out[0], AT) or b"").decode())
    assert scheduled.second == 0 and scheduled.microsecond == 0  # a minute boundary
    assert -60 <= _lateness_ms(out[0]) < 500, _lateness_ms(out[0])
    with psycopg.connect(nodes.database_url) as conn:
        row = conn.execute(
            "SELECT deadline, readied_at, recurrence FROM chronos_messages WHERE id = 'minutely'"
        ).fetchone()
    assert row is not None
    assert row[0] == scheduled + timedelta(minutes=1)  # advanced, unclaimed
    assert row[1] is None and "* * * * *" in row[2]


def test_chronos_expires_dead_letters_what_would_fire_stale(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    # Stored while the cluster was up; then it was away: each row carries its own limit.
    with psycopg.connect(nodes.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_key, message_value, expires_ms)"
            " VALUES ('stale', now() - interval '5 seconds', 'k', 'v1', 1000),"
            " ('patient', now() - interval '5 seconds', 'k', 'v2', 60000),"
            " ('default', now() - interval '5 seconds', 'k', 'v3', NULL)"
        )
    nodes.start()  # CHRONOS_MAX_LATENESS_MS is off: only the messages' own limits apply
    late = chronos_record(
        "arrived-late", now() - timedelta(hours=1), after=[("chronosExpires", b"PT1M")]
    )
    produce(kafka_bootstrap, topics.input, [late])
    out = read(kafka_bootstrap, topics.output, topics.partitions, 2)
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 2)
    assert sorted(r.value() or b"" for r in out) == [b"v2", b"v3"]
    assert sorted(r.value() or b"" for r in dead) == [b"v1", b"value"]
    for record in dead:
        reason = _header(record, DEAD_LETTER_REASON_HEADER) or b""
        assert reason.startswith(b"expired:") and b"chronosExpires" in reason, reason
    assert rows(nodes.database_url) == []


def test_a_series_whose_first_occurrence_is_past_is_stored_and_fired_once(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start(relay_deadline_header=AT)
    start = parse_deadline(format_deadline(now() - timedelta(hours=1, seconds=30)))  # ms
    produce(kafka_bootstrap, topics.input, [_series("catch-up", start, every="PT1H")])
    out = read(kafka_bootstrap, topics.output, topics.partitions, 1, settle=2)
    assert len(out) == 1  # the latest missed occurrence only (start + 1 h), not both
    assert parse_deadline((_header(out[0], AT) or b"").decode()) == start + timedelta(hours=1)
    with psycopg.connect(nodes.database_url) as conn:
        (deadline,) = conn.execute(
            "SELECT deadline FROM chronos_messages WHERE id = 'catch-up'"
        ).fetchone() or (None,)
    assert deadline == start + timedelta(hours=2)


def test_a_series_replaced_while_its_occurrence_is_claimed_is_given_back_not_advanced(
    migrated_database_url: str,
) -> None:
    store = PostgresStore(migrated_database_url)
    try:
        at = store.ping() + timedelta(milliseconds=300)
        every = Rule(every_ms=1_000).encode()
        store.enqueue([ScheduledMessage("s", at, b"k", b"v1", [], recurrence=every)], 0)
        node = str(uuid.uuid4())
        (row,) = store.claim(node, 1_000, 10, 10)
        later = at + timedelta(minutes=5)
        hourly = Rule(every_ms=3_600_000).encode()
        replacement = ScheduledMessage(
            "s", later, b"k", b"v2", [], Action.RESCHEDULE, recurrence=hourly
        )
        assert store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
        # The occurrence in flight (v1) is delivered; its advance finds the row replaced.
        done = store.delete_fired(node, [(row.id, row.readied_at)], [at + timedelta(seconds=1)])
        assert done == {"s"}
        with psycopg.connect(migrated_database_url) as conn:
            stored = conn.execute(
                "SELECT deadline, readied_at, message_value, recurrence FROM chronos_messages"
            ).fetchall()
        assert stored == [(later, None, b"v2", hourly)]
        # A one-shot message claimed is still left alone by a reschedule.
        store.enqueue([ScheduledMessage("once", at, b"k", b"v", [])], 0)
        store.claim(node, 1_000, 10, 10)
        again = ScheduledMessage("once", later, b"k", b"v2", [], Action.RESCHEDULE)
        assert store.enqueue([again], 0) == [Outcome.RESCHEDULE_CLAIMED]
    finally:
        store.close()


def test_series_a_year_behind_fire_with_the_rest_of_their_claimed_batch(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    # Series imported with their original start a year ago, and a one-shot message, all due:
    # one claim takes them together. Counting a year of minutes one by one took ~1 s a series,
    # so the batch passed the hold time, was given back, and was claimed again, for ever.
    minutely = Rule(cron="* * * * *").encode()
    with psycopg.connect(nodes.database_url, autocommit=True) as conn:
        for i in range(12):
            conn.execute(
                "INSERT INTO chronos_messages"
                " (id, deadline, message_key, message_value, recurrence)"
                " VALUES (%s, date_trunc('minute', now()) - interval '365 days', 'k', %s, %s)",
                (f"old-{i}", f"old-{i}".encode(), minutely),
            )
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_key, message_value)"
            " VALUES ('once', now() - interval '1 second', 'k', 'once')"
        )
    nodes.start(relay_deadline_header=AT)
    out = read(kafka_bootstrap, topics.output, topics.partitions, 13, timeout=30, settle=1)
    fired: dict[bytes, list[datetime]] = {}
    for record in out:
        at = parse_deadline((_header(record, AT) or b"").decode())
        fired.setdefault(record.value() or b"", []).append(at)
    assert sorted(fired) == sorted([b"once", *(f"old-{i}".encode() for i in range(12))])
    assert len(fired.pop(b"once")) == 1
    started = now()
    for instants in fired.values():  # the latest minute each time (a minute may pass), once
        assert len(set(instants)) == len(instants), instants
        assert all(i.second == 0 and started - i < timedelta(minutes=2) for i in instants)
    with psycopg.connect(nodes.database_url) as conn:  # each row advanced past its year
        deadlines = [d for (d,) in conn.execute("SELECT deadline FROM chronos_messages")]
    assert len(deadlines) == 12 and all(d > started - timedelta(minutes=1) for d in deadlines)
