"""Recurring messages in the firing loop (in-memory store, manual clock): each occurrence fires
on time and advances the row ("delete or advance"), a series ends at its until, at a cancel
(even one that arrives while an occurrence is claimed), and missed occurrences follow the
series' policy; chronosExpires bounds how late an occurrence or message may fire."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from chronos.firing.dispatcher import Dispatcher
from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    Action,
    ScheduledMessage,
    format_deadline,
    parse_record,
)
from chronos.recurrence import Rule
from chronos.store import ClaimedRow, Outcome
from chronos.testing import FakePublisher, unfenced
from tests.unit.helpers import DEAD_LETTER, OUTPUT, Firing, claimed_rows, settings


def _series(f: Firing, message_id: str, **headers: str) -> ScheduledMessage:
    names = {
        "deadline": "chronosDeadline",
        "every": "chronosEvery",
        "cron": "chronosCron",
        "until": "chronosUntil",
        "missed": "chronosMissed",
        "expires": "chronosExpires",
    }
    pairs = [("chronosMessageId", message_id.encode())]
    pairs += [(names[k], v.encode()) for k, v in headers.items()]
    m = parse_record(b"k", b"v", [*pairs, ("h", b"1")], now=f.clock.now())
    assert isinstance(m, ScheduledMessage), m
    assert f.store.enqueue([m], 0) == [Outcome.INSERTED]
    return m


def _counter(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_an_every_series_fires_each_occurrence_on_time_and_advances_its_row() -> None:
    f = Firing.create()
    start = f.at(1_000)
    before = _counter("chronos_occurrences_fired_total")
    _series(f, "tick", every="PT2S", deadline=format_deadline(start))
    f.run_for(9_000, step_ms=5)
    fired = [r for r in f.publisher.records if r.topic == OUTPUT]
    assert len(fired) == 5  # at 1, 3, 5, 7 and 9 s
    lateness = [
        r.timestamp_ms / 1000 - (start + timedelta(seconds=2 * i)).timestamp()
        for i, r in enumerate(fired)
    ]
    # fired the timing advance ahead (publish latency), every time: no drift
    advance = f.settings.timing_advance_ms / 1000
    assert all(-advance <= late < -advance + 0.02 for late in lateness), lateness
    assert all(r.headers == [("h", b"1")] for r in fired)  # Chronos headers never relayed
    row = f.store.get("tick")
    assert row is not None and row.readied_at is None
    assert row.deadline == start + timedelta(seconds=10)  # the next occurrence, no drift
    assert _counter("chronos_occurrences_fired_total") == before + 5


def test_a_series_ends_at_its_until() -> None:
    f = Firing.create()
    start = f.at(500)
    until = start + timedelta(seconds=3)
    _series(f, "s", every="PT1S", deadline=format_deadline(start), until=format_deadline(until))
    f.run_for(10_000, step_ms=10)
    assert len([r for r in f.publisher.records if r.topic == OUTPUT]) == 4  # 0, 1, 2, 3 s
    assert len(f.store) == 0


def test_a_cancel_ends_a_waiting_series() -> None:
    f = Firing.create()
    _series(f, "s", every="PT5S", deadline=format_deadline(f.at(500)))
    f.run_for(5_700, step_ms=10)  # two occurrences; the next is not claimed yet
    cancel = ScheduledMessage("s", f.clock.now(), None, None, [], Action.CANCEL)
    assert f.store.enqueue([cancel], 0) == [Outcome.CANCELLED]
    f.run_for(5_000, step_ms=10)
    assert len([r for r in f.publisher.records if r.topic == OUTPUT]) == 2
    assert len(f.store) == 0


def test_a_cancel_while_an_occurrence_is_claimed_lets_it_fire_and_ends_the_series() -> None:
    f = Firing.create(auto=False)  # deliveries wait for the test
    _series(f, "s", every="PT1S", deadline=format_deadline(f.at(100)))
    f.run_for(200, step_ms=10)  # claimed and produced, delivery pending
    assert len(f.publisher.pending()) == 1
    cancel = ScheduledMessage("s", f.clock.now(), None, None, [], Action.CANCEL)
    assert f.store.enqueue([cancel], 0) == [Outcome.CANCEL_CLAIMED]
    f.publisher.deliver()
    f.run_for(5_000, step_ms=10)
    assert len([r for r in f.publisher.records if r.topic == OUTPUT]) == 1
    assert len(f.store) == 0  # deleted, not advanced: no further occurrence


def test_missed_occurrences_fire_the_latest_once_and_are_counted() -> None:
    f = Firing.create()
    start = f.at(1_000)
    _series(f, "s", every="PT1M", deadline=format_deadline(start))
    skipped = _counter("chronos_occurrences_skipped_total")
    f.clock.advance(1_000 + 10 * 60_000 + 5_000)  # the cluster was away ten minutes
    f.run_for(100, step_ms=10)
    fired = [r for r in f.publisher.records if r.topic == OUTPUT]
    assert len(fired) == 1
    assert _counter("chronos_occurrences_skipped_total") == skipped + 10
    row = f.store.get("s")
    assert row is not None and row.deadline == start + timedelta(minutes=11)


def test_missed_all_fires_every_missed_occurrence_in_order() -> None:
    f = Firing.create(relay_deadline_header="scheduledAt")
    start = f.at(1_000)
    _series(f, "s", every="PT1M", deadline=format_deadline(start), missed="all")
    f.clock.advance(1_000 + 3 * 60_000 + 5_000)
    f.run_for(500, step_ms=5)
    fired = [r for r in f.publisher.records if r.topic == OUTPUT]
    instants = [dict(r.headers)["scheduledAt"] for r in fired]
    assert instants == [format_deadline(start + timedelta(minutes=i)).encode() for i in range(4)]


def test_the_relayed_instant_is_the_occurrence_fired() -> None:
    f = Firing.create(relay_id_header="id", relay_deadline_header="at")
    start = f.at(1_000)
    _series(f, "s", every="PT1M", deadline=format_deadline(start))
    f.clock.advance(1_000 + 5 * 60_000 + 1_000)  # latest missed: start + 5 min
    f.run_for(100, step_ms=10)
    (fired,) = [r for r in f.publisher.records if r.topic == OUTPUT]
    headers = dict(fired.headers)
    assert headers["id"] == b"s"
    assert headers["at"] == format_deadline(start + timedelta(minutes=5)).encode()


def test_an_expired_occurrence_is_dead_lettered_and_the_series_goes_on() -> None:
    f = Firing.create()
    start = f.at(1_000)
    _series(f, "s", every="PT1M", deadline=format_deadline(start), expires="PT10S", missed="all")
    f.clock.advance(1_000 + 30_000)  # the first occurrence is 30 s late: past its 10 s
    f.run_for(100, step_ms=10)
    (dead,) = [r for r in f.publisher.records if r.topic == DEAD_LETTER]
    reason = dict(dead.headers)[DEAD_LETTER_REASON_HEADER] or b""
    assert reason.startswith(b"expired:") and b"chronosExpires (10000 ms)" in reason
    assert [r for r in f.publisher.records if r.topic == OUTPUT] == []
    f.run_for(60_000, step_ms=10)  # the next occurrence is on time: fired
    assert len([r for r in f.publisher.records if r.topic == OUTPUT]) == 1
    row = f.store.get("s")
    assert row is not None and row.deadline == start + timedelta(minutes=2)


def test_a_one_shot_message_with_its_own_expiry_wins_over_the_default() -> None:
    f = Firing.create(max_lateness_ms=3_600_000)
    deadline = f.at(1_000)
    m = parse_record(
        b"k",
        b"v",
        [
            ("chronosMessageId", b"m"),
            ("chronosDeadline", format_deadline(deadline).encode()),
            ("chronosExpires", b"PT5S"),
        ],
        now=f.clock.now(),
    )
    assert isinstance(m, ScheduledMessage)
    assert f.store.enqueue([m], 0) == [Outcome.INSERTED]
    f.clock.advance(1_000 + 6_000)
    f.run_for(100, step_ms=10)
    assert [r.topic for r in f.publisher.records] == [DEAD_LETTER]
    assert len(f.store) == 0


def test_a_due_series_is_stored_not_fired_directly() -> None:
    f = Firing.create()
    past = datetime.now(UTC) - timedelta(days=1)
    m = parse_record(
        None,
        None,
        [
            ("chronosMessageId", b"s"),
            ("chronosDeadline", format_deadline(past).encode()),
            ("chronosEvery", b"PT1H"),
        ],
        now=f.clock.now(),
    )
    assert isinstance(m, ScheduledMessage)
    assert f.store.enqueue([m], 0) == [Outcome.INSERTED]  # a one-shot would be FIRE_NOW


def test_a_reschedule_while_an_occurrence_is_claimed_replaces_the_series_after_it() -> None:
    f = Firing.create(auto=False, relay_deadline_header="at")
    _series(f, "s", every="PT1S", deadline=format_deadline(f.at(100)))
    f.run_for(200, step_ms=10)  # claimed and produced, delivery pending
    assert len(f.publisher.pending()) == 1
    new_start = f.at(10_000)
    replacement = parse_record(
        b"k2",
        b"v2",
        [
            ("chronosMessageId", b"s"),
            ("chronosAction", b"reschedule"),
            ("chronosDeadline", format_deadline(new_start).encode()),
            ("chronosEvery", b"PT1M"),
        ],
        now=f.clock.now(),
    )
    assert isinstance(replacement, ScheduledMessage)
    assert f.store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
    f.publisher.deliver()
    f.run_for(9_000, step_ms=10)  # the old series' next occurrence (1.1 s) never comes
    f.publisher.deliver()
    assert [r.value for r in f.publisher.records] == [b"v"]
    row = f.store.get("s")
    assert row is not None and row.readied_at is None and row.deadline == new_start
    f.run_for(1_500, step_ms=10)
    f.publisher.deliver()
    f.run_for(100, step_ms=10)
    assert [r.value for r in f.publisher.records] == [b"v", b"v2"]
    row = f.store.get("s")
    assert row is not None and row.deadline == new_start + timedelta(minutes=1)


def test_a_reschedule_of_a_claimed_one_shot_message_is_still_not_applied() -> None:
    f = Firing.create(auto=False)
    m = parse_record(
        b"k",
        b"v",
        [("chronosMessageId", b"m"), ("chronosDeadline", format_deadline(f.at(100)).encode())],
        now=f.clock.now(),
    )
    assert isinstance(m, ScheduledMessage) and f.store.enqueue([m], 0) == [Outcome.INSERTED]
    f.run_for(200, step_ms=10)
    again = ScheduledMessage("m", f.at(5_000), b"k", b"v2", [], Action.RESCHEDULE)
    assert f.store.enqueue([again], 0) == [Outcome.RESCHEDULE_CLAIMED]


# ------------------------------------------------------------------------------ far-past series


def _far_past(rule: Rule, due: datetime, count: int) -> list[ClaimedRow]:
    """Series rows as a claim returns them, their occurrence ``due`` long past (imported with
    their original start, or the cluster was away)."""
    now = datetime.now(UTC)
    return [
        row._replace(
            id=f"series-{i}",
            deadline=due.timestamp(),
            remaining_ms=(due - now).total_seconds() * 1000,
            recurrence=rule.encode(),
        )
        for i, row in enumerate(claimed_rows(count, size=10))
    ]


def test_a_claimed_batch_of_series_a_year_behind_is_timed_well_within_the_hold_time() -> None:
    config = settings()
    dispatcher = Dispatcher(config, FakePublisher(), unfenced(config.node_id))
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0)
    rows = _far_past(Rule(cron="*/1 * * * *"), minute - timedelta(days=365), 20)
    rows += claimed_rows(5, size=10, due_in_ms=200)  # one-shot messages in the same batch
    started = time.monotonic()
    dispatcher.add(rows)
    elapsed = time.monotonic() - started
    # Before: each series counted up to 100,000 missed occurrences (~0.5-1.2 s a row), so the
    # batch passed the hold time (5 s) and was given back to be claimed again, for ever.
    assert elapsed < config.hold_time_ms / 1000 / 4, elapsed
    timers = [timer for _, _, timer in dispatcher.timers if timer.row.recurrence]
    assert len(timers) == 20
    latest = minute if datetime.now(UTC) < minute + timedelta(minutes=1) else None
    for timer in timers:
        fired = datetime.fromtimestamp(timer.row.deadline, UTC)
        assert latest is None or fired == latest  # the latest occurrence not after now
        assert timer.next_deadline == fired + timedelta(minutes=1)
        # every minute of the year up to the one fired (counted, then estimated)
        assert timer.skipped == (fired - (minute - timedelta(days=365))) // timedelta(minutes=1)


def test_once_a_batch_spent_its_counting_budget_its_series_estimate_their_skips() -> None:
    config = settings(hold_time_ms=5000, delivery_timeout_ms=3000)
    # Every look at the clock is 0.3 s later: the budget (2% of a 5 s hold time) is spent
    # after the first series.
    ticks = itertools.count(start=0.0, step=0.3)
    dispatcher = Dispatcher(
        config, FakePublisher(), unfenced(config.node_id), monotonic=lambda: next(ticks)
    )
    weekdays = Rule(cron="0 9 * * 1-5")
    due = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday; claimed four weeks later
    rows = _far_past(weekdays, due, 3)
    back = datetime(2026, 3, 30, 10, 0, tzinfo=UTC)
    rows = [r._replace(remaining_ms=(due - back).total_seconds() * 1000) for r in rows]
    dispatcher.add(rows)
    skipped = sorted(timer.skipped for _, _, timer in dispatcher.timers)
    # The first row counts its 20 missed weekdays; the others, past the budget, estimate them
    # in O(1) from the rule's period after the occurrence fired (a day): 28.
    assert skipped == [20, 28, 28]
    fired = {timer.row.deadline for _, _, timer in dispatcher.timers}
    assert fired == {datetime(2026, 3, 30, 9, 0, tzinfo=UTC).timestamp()}


def _replacement(f: Firing, deadline: datetime, *series: tuple[str, bytes]) -> ScheduledMessage:
    m = parse_record(
        b"k2",
        b"v2",
        [
            ("chronosMessageId", b"s"),
            ("chronosAction", b"reschedule"),
            ("chronosDeadline", format_deadline(deadline).encode()),
            *series,
        ],
        now=f.clock.now(),
    )
    assert isinstance(m, ScheduledMessage)
    return m


def test_a_reschedule_while_a_series_last_occurrence_is_claimed_fires_after_it() -> None:
    # The claimed occurrence is the series' last (its until): the delete of the fired batch has
    # no next occurrence at all, and still gives the replacement back (the store deletes it in a
    # plain delete of one-shot messages).
    f = Firing.create(auto=False)
    start = f.at(100)
    _series(f, "s", every="PT1S", deadline=format_deadline(start), until=format_deadline(start))
    f.run_for(200, step_ms=10)  # claimed and produced, delivery pending
    assert len(f.publisher.pending()) == 1
    replacement = _replacement(f, f.at(2_000))
    assert f.store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
    f.publisher.deliver()
    f.run_for(1_000, step_ms=10)
    row = f.store.get("s")
    assert row is not None and row.readied_at is None and row.deadline == replacement.deadline
    f.run_for(1_500, step_ms=10)
    f.publisher.deliver()
    f.run_for(100, step_ms=10)
    assert [r.value for r in f.publisher.records if r.topic == OUTPUT] == [b"v", b"v2"]
    assert len(f.store) == 0  # the replacement was a one-shot message: fired and deleted


def test_a_reschedule_then_a_cancel_while_an_occurrence_is_claimed_ends_the_series() -> None:
    f = Firing.create(auto=False)
    _series(f, "s", every="PT1S", deadline=format_deadline(f.at(100)))
    f.run_for(200, step_ms=10)  # claimed and produced, delivery pending
    replacement = _replacement(f, f.at(2_000), ("chronosEvery", b"PT1M"))
    assert f.store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
    cancel = ScheduledMessage("s", f.clock.now(), None, None, [], Action.CANCEL)
    assert f.store.enqueue([cancel], 0) == [Outcome.CANCEL_CLAIMED]
    f.publisher.deliver()
    f.run_for(5_000, step_ms=10)
    f.publisher.deliver()
    assert [r.value for r in f.publisher.records if r.topic == OUTPUT] == [b"v"]
    assert len(f.store) == 0  # the cancel won over the replacement
