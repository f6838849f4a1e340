"""The store contract of the history of ended messages: each way a message ends writes one record
(fired with its record's position, lateness and node; cancelled by a Kafka record or the admin
API, by whom; expired; dead-lettered; replaced by a reschedule; a series' occurrence with the one
that follows), in the statement that ends it, or, for a message that ended without a row (intake's),
in one statement for the lot; a message fired twice keeps both records; records are found by
their message's key (exact or a prefix), and one written without a key (by the release before the
history kept keys) by none; the leader's maintenance purges whole days past the TTL they were
created with; no partition or no history never stops a message from ending."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

import pytest

from chronos.protocol import Action, ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import CancelOutcome, EndedOnArrival, Ending, MessageFilter, Outcome
from chronos.store.history import CANCELLED, DEAD_LETTERED, EXPIRED, FIRED, KAFKA_CANCEL, REPLACED
from tests.support.store_contract.common import HORIZON, Harness, claims, msg, node

WEEK = timedelta(days=7)
DAY = timedelta(days=1)


class HistoryHarness(Harness, Protocol):
    def cancel_as_previous_release(self, message_id: str) -> None:
        """Cancel a waiting message as the release before the history kept keys did: its record
        has no key."""


def fire(
    harness: Harness, message_id: str, ending: Ending | None = None, key: bytes | None = b"k"
) -> str:
    """Enqueue ``message_id`` (with ``key``) due at once, claim it and delete it as delivered
    (``ending``: its history entry; None: fired, no position); returns the claiming node."""
    store, me = harness.store, node()
    store.enqueue([msg(message_id, harness.now() + timedelta(milliseconds=300), key)], 0)
    rows = [r for r in store.claim(me, HORIZON, 100, 5) if r.id == message_id]
    assert len(rows) == 1
    ends = None if ending is None else [ending]
    assert store.delete_fired(me, claims(rows), None, ends) == {message_id}
    return me


class HistoryContract:
    """Subclasses provide a ``harness`` fixture."""

    def test_a_fired_message_is_found_with_its_record_lateness_and_node(
        self, harness: Harness
    ) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        before = harness.now()
        me = fire(harness, "m", Ending(FIRED, "orders", 3, 18112, 3, None))
        assert store.get_message("m") is None
        (record,) = store.ended_messages("m")
        assert (record.outcome, record.topic, record.partition, record.offset) == (
            FIRED,
            "orders",
            3,
            18112,
        )
        assert (record.lateness_ms, record.node, record.attempt) == (3, me, 1)
        assert record.tenant == "" and not record.recurring and record.next_deadline is None
        assert before <= record.ended_at <= harness.now()
        assert before < record.deadline

    def test_a_message_fired_twice_keeps_both_records(self, harness: Harness) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        fire(harness, "twice", Ending(FIRED, "out", 0, 1, 5, None))
        fire(harness, "twice", Ending(FIRED, "out", 0, 2, 7, None))
        records = store.ended_messages("twice")
        assert sorted(r.offset or 0 for r in records) == [1, 2]
        assert records[0].ended_at >= records[1].ended_at  # newest first

    @pytest.mark.parametrize(
        ("ending", "outcome"),
        [
            (Ending(EXPIRED, "dlq", 0, 9, 61_000, "expired"), EXPIRED),
            (Ending(EXPIRED, None, None, None, 61_000, "expired"), EXPIRED),  # dropped
            (Ending(DEAD_LETTERED, "dlq", 1, 4, 12, "publish_failed"), DEAD_LETTERED),
        ],
        ids=["expired", "expired-dropped", "dead-lettered"],
    )
    def test_expired_and_dead_lettered_messages_are_recorded_with_their_reason(
        self, harness: Harness, ending: Ending, outcome: str
    ) -> None:
        harness.store.maintain_history(WEEK)
        fire(harness, "gone", ending)
        (record,) = harness.store.ended_messages("gone")
        assert (record.outcome, record.topic, record.offset) == (
            outcome,
            ending.topic,
            ending.offset,
        )
        assert record.reason == ending.reason

    def test_messages_that_ended_without_a_row_are_recorded_in_one_statement(
        self, harness: Harness
    ) -> None:
        store, me = harness.store, node()
        store.maintain_history(WEEK)
        due = harness.now() - timedelta(seconds=2)
        before = harness.now()
        ended = [
            EndedOnArrival("direct", "", due, Ending(FIRED, "orders", 2, 41, 1_500, None), 1),
            EndedOnArrival(
                "gone", "acme", due, Ending(EXPIRED, None, None, None, 90_000, "expired")
            ),
            EndedOnArrival(
                "refused",
                "",
                due,
                Ending(DEAD_LETTERED, "dlq", 0, 7, None, "database_refused"),
                1,
                recurring=True,
            ),
        ]
        assert store.record_ended(me, ended) == 3
        (fired,) = store.ended_messages("direct")
        assert (fired.outcome, fired.topic, fired.partition, fired.offset) == (
            FIRED,
            "orders",
            2,
            41,
        )
        assert (fired.lateness_ms, fired.node, fired.attempt, fired.deadline) == (1_500, me, 1, due)
        assert fired.tenant == "" and fired.reason is None and not fired.recurring
        assert before <= fired.ended_at <= harness.now()
        (gone,) = store.ended_messages("gone")
        assert (gone.outcome, gone.tenant, gone.reason, gone.lateness_ms) == (
            EXPIRED,
            "acme",
            "expired",
            90_000,
        )
        assert (gone.topic, gone.partition, gone.offset, gone.attempt) == (None, None, None, None)
        (refused,) = store.ended_messages("refused")
        assert (refused.outcome, refused.reason, refused.offset) == (
            DEAD_LETTERED,
            "database_refused",
            7,
        )
        assert refused.recurring and refused.lateness_ms is None
        # Dropped alone (no position at all), and again: each end is one more record.
        assert store.record_ended(me, ended[1:2]) == 1
        assert len(store.ended_messages("gone")) == 2
        assert store.get_message("direct") is None  # no row comes of it
        assert [r.id for r in store.find_ended(MessageFilter(state="fired"), limit=9)] == ["direct"]

    def test_messages_that_ended_without_a_row_need_the_history_and_its_day(
        self, harness: Harness
    ) -> None:
        store, me = harness.store, node()
        ended = [EndedOnArrival("x", "", harness.now(), Ending(FIRED, "out", 0, 1, 1, None), 1)]
        assert store.record_ended(me, ended) == 0  # no day yet: not written, never raised
        store.maintain_history(WEEK)
        store.history = False
        assert store.record_ended(me, ended) == 0
        assert store.record_ended(me, []) == 0
        assert store.ended_messages("x") == []

    def test_cancels_are_recorded_with_who_cancelled(self, harness: Harness) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        later = harness.now() + timedelta(hours=1)
        store.enqueue([msg(i, later) for i in ("by-kafka", "by-admin", "by-filter")], 0)
        cancel = ScheduledMessage("by-kafka", later, None, None, [], Action.CANCEL)
        assert store.enqueue([cancel], 0) == [Outcome.CANCELLED]
        assert store.cancel_message("by-admin", by="alice") is CancelOutcome.CANCELLED
        done = store.bulk_cancel(MessageFilter(id_prefix="by-f"), park_attempts=5, by="bob")
        assert done.done == 1
        who = {i: store.ended_messages(i) for i in ("by-kafka", "by-admin", "by-filter")}
        assert [(r.outcome, r.ended_by) for r in who["by-kafka"]] == [(CANCELLED, KAFKA_CANCEL)]
        assert [(r.outcome, r.ended_by) for r in who["by-admin"]] == [(CANCELLED, "alice")]
        assert [(r.outcome, r.ended_by) for r in who["by-filter"]] == [(CANCELLED, "bob")]
        assert who["by-admin"][0].deadline == later

    def test_a_reschedule_records_the_message_it_replaced(self, harness: Harness) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        first, second = harness.now() + timedelta(hours=1), harness.now() + timedelta(hours=2)
        store.enqueue([msg("r", first)], 0)
        again = ScheduledMessage("r", second, b"k", b"v2", [], Action.RESCHEDULE)
        assert store.enqueue([again], 0) == [Outcome.RESCHEDULED]
        (record,) = store.ended_messages("r")
        assert (record.outcome, record.deadline) == (REPLACED, first)

    def test_a_series_occurrence_is_recorded_with_the_next_one(self, harness: Harness) -> None:
        store, me = harness.store, node()
        store.maintain_history(WEEK)
        at = harness.now() + timedelta(milliseconds=300)
        rule = Rule(every_ms=3_600_000).encode()
        store.enqueue([ScheduledMessage("s", at, b"k", b"v", [], recurrence=rule)], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        following = at + timedelta(hours=1)
        ending = Ending(FIRED, "out", 0, 7, 1, None)
        assert store.delete_fired(me, claims(rows), [following], [ending]) == {"s"}
        (record,) = store.ended_messages("s")
        assert record.recurring and record.next_deadline == following
        assert store.get_message("s") is not None  # the series goes on

    def test_a_claim_given_no_entry_is_not_recorded(self, harness: Harness) -> None:
        store, me = harness.store, node()
        store.maintain_history(WEEK)
        store.enqueue([msg("quiet", harness.now() + timedelta(milliseconds=300))], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        assert store.delete_fired(me, claims(rows), None, [None]) == {"quiet"}
        assert store.ended_messages("quiet") == []

    def test_no_history_without_a_partition_and_the_message_ends_all_the_same(
        self, harness: Harness
    ) -> None:
        fire(harness, "unrecorded", Ending(FIRED, "out", 0, 1, 1, None))
        assert harness.store.get_message("unrecorded") is None
        assert harness.store.ended_messages("unrecorded") == []

    def test_history_off_records_nothing(self, harness: Harness) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        store.history = False
        fire(harness, "off", Ending(FIRED, "out", 0, 1, 1, None))
        store.enqueue([msg("off-c", harness.now() + timedelta(hours=1))], 0)
        assert store.cancel_message("off-c", by="alice") is CancelOutcome.CANCELLED
        assert store.ended_messages("off") == [] and store.ended_messages("off-c") == []
        assert store.get_message("off") is None and store.get_message("off-c") is None

    def test_the_maintenance_creates_days_ahead_and_drops_them_past_their_ttl(
        self, harness: Harness
    ) -> None:
        store = harness.store
        first = store.maintain_history(DAY)
        assert len(first.created) == 3 and first.dropped == [] and first.failed == []
        assert store.maintain_history(DAY).created == []  # idempotent
        fire(harness, "old", Ending(FIRED, "out", 0, 1, 1, None))
        assert len(store.ended_messages("old")) == 1
        # Three days on, today's and tomorrow's partitions (each kept a day past its end) are
        # dropped whole; the TTL given now (30 days) applies to the partitions created from now
        # on only: the third day's, created with a day, goes at its own time.
        later = store.maintain_history(30 * DAY, at=harness.now() + 3 * DAY)
        assert later.dropped == first.created[:2]
        assert len(later.created) == 3  # that day's and the two after it
        assert store.ended_messages("old") == []
        at = harness.now() + 6 * DAY
        assert store.maintain_history(30 * DAY, at=at).dropped == first.created[2:]

    def test_a_ttl_of_zero_creates_no_partition(self, harness: Harness) -> None:
        done = harness.store.maintain_history(timedelta(0))
        assert done.created == [] and done.partitions == 0

    def test_ended_messages_are_listed_by_state_and_tenant_with_a_cursor(
        self, harness: Harness
    ) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        for i in range(5):
            fire(harness, f"f{i}", Ending(FIRED, "out", 0, i, i * 10, None))
        fire(harness, "x0", Ending(EXPIRED, None, None, None, 90_000, "expired"))
        fired = MessageFilter(state="fired")
        page = store.find_ended(fired, limit=3)
        assert [r.id for r in page] == ["f0", "f1", "f2"]
        rest = store.find_ended(fired, limit=3, after=(page[-1].deadline, page[-1].id))
        assert [r.id for r in rest] == ["f3", "f4"]
        assert [r.id for r in store.find_ended(MessageFilter(state="expired"), limit=10)] == ["x0"]
        everything = store.find_ended(MessageFilter(state="ended"), limit=10)
        assert len(everything) == 6
        assert store.find_ended(MessageFilter(state="fired", tenant="other"), limit=10) == []
        assert len(store.find_ended(MessageFilter(state="fired", id_prefix="f1"), limit=9)) == 1
        assert store.find_messages(fired, park_attempts=5, limit=10) == []  # not waiting rows

    def test_a_listed_page_is_bounded_by_its_keys_bytes_a_message_whole(
        self, harness: Harness
    ) -> None:
        """Records of 100 KB keys: messages are taken while the keys before theirs weigh less
        than the budget (the one that crosses it is the last, the caller's sign that there is
        more), a message fired twice with both its records."""
        store, me = harness.store, node()
        store.maintain_history(WEEK)
        big = bytes(range(256)) * 400  # 102,400 bytes
        due = harness.now() + timedelta(milliseconds=300)

        def fire_at(message_id: str, offset: int) -> None:
            store.enqueue([msg(message_id, due, big)], 0)
            rows = [r for r in store.claim(me, HORIZON, 100, 5) if r.id == message_id]
            assert len(rows) == 1
            ends = [Ending(FIRED, "out", 0, offset, 1, None)]
            assert store.delete_fired(me, claims(rows), None, ends) == {message_id}

        for i in range(6):
            fire_at(f"b{i}", i)
        fire_at("b1", 10)  # fired twice: two records at one (deadline, id)
        fired = MessageFilter(state="fired")

        def ids(max_bytes: int | None, after: tuple[datetime, str] | None = None) -> list[str]:
            return [
                r.id for r in store.find_ended(fired, limit=10, max_bytes=max_bytes, after=after)
            ]

        assert ids(250_000) == ["b0", "b1", "b1"]  # b2 has 307,200 bytes before it
        assert ids(110_000) == ["b0", "b1", "b1"]  # b1 crosses the budget: whole
        assert ids(102_400) == ["b0"]
        assert ids(1) == ["b0"]  # one message at least, whatever its size
        assert ids(None) == ["b0", "b1", "b1", "b2", "b3", "b4", "b5"]
        assert ids(250_000, after=(due, "b1")) == ["b2", "b3", "b4"]

    def test_the_summary_counts_by_tenant_and_outcome_with_lateness(self, harness: Harness) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        since = harness.now() - timedelta(minutes=1)
        for i, late in enumerate((1, 2, 3, 4, 100)):
            fire(harness, f"s{i}", Ending(FIRED, "out", 0, i, late, None))
        fire(harness, "dl", Ending(DEAD_LETTERED, "dlq", 0, 1, 5, "publish_failed"))
        summary = {(s.tenant, s.outcome): s for s in store.summarize_history(since)}
        assert set(summary) == {("", FIRED), ("", DEAD_LETTERED)}
        fired = summary[("", FIRED)]
        assert fired.count == 5 and fired.lateness_p50_ms == 3
        assert fired.lateness_p99_ms is not None and 96 < fired.lateness_p99_ms < 100
        assert summary[("", DEAD_LETTERED)].count == 1
        assert summary[("", DEAD_LETTERED)].lateness_p50_ms is None
        assert store.summarize_history(harness.now() + timedelta(minutes=1)) == []
        assert store.summarize_history(since, tenant="nobody") == []

    @pytest.mark.parametrize("ends_by", ["release", "reset_stuck", "release_node"])
    def test_a_message_whose_cancel_wins_as_its_claim_ends_is_recorded_cancelled(
        self, harness: Harness, ends_by: str
    ) -> None:
        store, me = harness.store, node()
        store.maintain_history(WEEK)
        store.enqueue([msg("c", harness.now() + timedelta(milliseconds=300))], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        cancel = ScheduledMessage("c", harness.now(), None, None, [], Action.CANCEL)
        assert store.enqueue([cancel], 0) == [Outcome.CANCEL_CLAIMED]
        if ends_by == "release":
            store.release(me, claims(rows), failed=False)
        elif ends_by == "reset_stuck":
            harness.advance(10)  # the claim is older than a hold time of 0
            stuck = store.find_stuck(0, 10)
            assert [s.id for s in stuck] == ["c"]
            store.reset_stuck(stuck)
        else:
            store.release_node(me)
        assert store.get_message("c") is None
        (record,) = store.ended_messages("c")
        assert (record.outcome, record.reason) == (CANCELLED, "cancelled while claimed")

    def test_ended_messages_are_found_by_their_key_exact_or_by_prefix(
        self, harness: Harness
    ) -> None:
        store, me = harness.store, node()
        store.maintain_history(WEEK)
        fire(harness, "k-fired", Ending(FIRED, "out", 0, 1, 1, None), key=b"order-123")
        fire(harness, "k-expired", Ending(EXPIRED, None, None, None, 9, "expired"), b"order-125")
        fire(harness, "k-other", Ending(FIRED, "out", 0, 2, 1, None), key=b"invoice-123")
        fire(harness, "k-none", Ending(FIRED, "out", 0, 3, 1, None), key=None)
        long_a, long_b = b"x" * 64 + b"a", b"x" * 64 + b"b"  # past the 64 bytes indexed
        fire(harness, "k-long-a", Ending(FIRED, "out", 0, 4, 1, None), key=long_a)
        fire(harness, "k-long-b", Ending(FIRED, "out", 0, 5, 1, None), key=long_b)
        store.enqueue([msg("k-cancelled", harness.now() + timedelta(hours=1), b"order-124")], 0)
        assert store.cancel_message("k-cancelled", by="alice") is CancelOutcome.CANCELLED
        arrived = EndedOnArrival(
            "k-direct", "", harness.now(), Ending(FIRED, "out", 1, 6, 2, None), 1, key=b"order-126"
        )
        assert store.record_ended(me, [arrived]) == 1

        def found(state: str, key: bytes, prefix: bool = False) -> list[str]:
            where = MessageFilter(state=state, key=key, key_prefix=prefix)
            return sorted(r.id for r in store.find_ended(where, limit=20))

        assert found("fired", b"order-123") == ["k-fired"]
        assert found("cancelled", b"order-124") == ["k-cancelled"]
        assert found("expired", b"order-125") == ["k-expired"]
        assert found("ended", b"order-126") == ["k-direct"]
        assert found("ended", b"order-123") == ["k-fired"]
        assert found("cancelled", b"order-123") == []  # the key, not of that outcome
        assert found("ended", b"order-12") == [] and found("ended", b"order-1234") == []
        assert found("ended", b"order-12", prefix=True) == [
            "k-cancelled",
            "k-direct",
            "k-expired",
            "k-fired",
        ]
        assert found("expired", b"order-", prefix=True) == ["k-expired"]
        assert found("ended", b"invoice", prefix=True) == ["k-other"]
        assert found("ended", b"nothing", prefix=True) == []
        assert found("ended", long_a) == ["k-long-a"]
        assert found("ended", long_b[:65], prefix=True) == ["k-long-b"]
        assert found("ended", b"x" * 64, prefix=True) == ["k-long-a", "k-long-b"]
        assert found("ended", b"x" * 64) == []
        # Each record keeps its message's key; none for a message without one.
        (fired,) = store.ended_messages("k-fired")
        assert fired.key == b"order-123"
        assert [r.key for r in store.ended_messages("k-cancelled")] == [b"order-124"]
        assert [r.key for r in store.ended_messages("k-direct")] == [b"order-126"]
        assert [r.key for r in store.ended_messages("k-none")] == [None]
        # The cursor pages a key's records as any other filter's.
        by_prefix = MessageFilter(state="ended", key=b"order-", key_prefix=True)
        first = store.find_ended(by_prefix, limit=3)
        rest = store.find_ended(by_prefix, limit=3, after=(first[-1].deadline, first[-1].id))
        assert len(first) == 3 and len(rest) == 1
        assert {r.id for r in first + rest} == {"k-fired", "k-expired", "k-cancelled", "k-direct"}

    def test_a_record_without_a_key_is_listed_but_never_found_by_a_key(
        self, harness: HistoryHarness
    ) -> None:
        store = harness.store
        store.maintain_history(WEEK)
        later = harness.now() + timedelta(hours=1)
        store.enqueue([msg("old", later, b"order-1"), msg("new", later, b"order-1")], 0)
        harness.cancel_as_previous_release("old")
        assert store.cancel_message("new", by="alice") is CancelOutcome.CANCELLED
        assert store.get_message("old") is None
        (old,) = store.ended_messages("old")
        assert (old.outcome, old.key, old.ended_by) == (CANCELLED, None, "previous release")
        listed = store.find_ended(MessageFilter(state="cancelled"), limit=10)
        assert sorted(r.id for r in listed) == ["new", "old"]
        for where in (
            MessageFilter(state="cancelled", key=b"order-1"),
            MessageFilter(state="ended", key=b"order-", key_prefix=True),
        ):
            assert [r.id for r in store.find_ended(where, limit=10)] == ["new"]
