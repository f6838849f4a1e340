"""The behaviour every Store must have, written once and run against each implementation.

``tests/unit/test_store_memory.py`` runs it against ``chronos.testing.InMemoryStore`` (a manual
clock: time moves only when the test says); ``tests/integration/test_store_postgres.py`` runs the
very same tests against ``PostgresStore`` on the real Postgres (real time: ``advance`` sleeps).
Deadlines sit seconds away from every boundary, so the real clock moving never changes an answer.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Protocol

import pytest

from chronos.errors import StoreError
from chronos.protocol import Headers, ScheduledMessage
from chronos.store import (
    CancelOutcome,
    ClaimedRow,
    MessageRecord,
    Outcome,
    RequeueOutcome,
    RescheduleOutcome,
    Store,
    StuckRow,
)

HORIZON = 1_000  # ms: claim rows due within a second
FAR = 3_600_000  # ms: an hour


class Harness(Protocol):
    store: Store

    def now(self) -> datetime:
        """The store's current time ("now()" of the SQL)."""

    def advance(self, ms: int) -> None:
        """Let ``ms`` milliseconds pass for the store."""


def node() -> str:
    return str(uuid.uuid4())


def msg(
    message_id: str,
    deadline: datetime,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: Headers | None = None,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, key, value, list(headers or []))


def _claimed(store: Store) -> list[MessageRecord]:
    return store.list_messages(state="claimed", park_attempts=5, limit=100)


def claims(rows: list[ClaimedRow]) -> list[tuple[str, datetime]]:
    return [(r.id, r.readied_at) for r in rows]


class StoreContract:
    """Subclasses provide a ``harness`` fixture."""

    # -------------------------------------------------------------------- enqueue

    def test_future_message_is_inserted_then_a_duplicate_ignored(self, harness: Harness) -> None:
        store = harness.store
        deadline = harness.now() + timedelta(minutes=5)
        assert store.enqueue([msg("a", deadline, value=b"first")], 50) == [Outcome.INSERTED]
        assert store.enqueue([msg("a", deadline, value=b"second")], 50) == [Outcome.DUPLICATE]
        stored = store.get_message("a", include_value=True)
        assert stored is not None
        assert stored.value == b"first"
        assert stored.deadline == deadline

    def test_lapsed_unknown_message_is_fired_now_and_not_stored(self, harness: Harness) -> None:
        store = harness.store
        past = harness.now() - timedelta(seconds=30)
        assert store.enqueue([msg("late", past)], 50) == [Outcome.FIRE_NOW]
        assert store.get_message("late") is None

    def test_deadline_within_the_timing_advance_counts_as_lapsed(self, harness: Harness) -> None:
        store = harness.store
        soon = harness.now() + timedelta(seconds=5)
        assert store.enqueue([msg("soon", soon)], 10_000) == [Outcome.FIRE_NOW]
        assert store.enqueue([msg("soon", soon)], 0) == [Outcome.INSERTED]

    def test_lapsed_message_with_a_scheduled_id_is_ignored(self, harness: Harness) -> None:
        store = harness.store
        store.enqueue([msg("x", harness.now() + timedelta(minutes=5))], 0)
        past = harness.now() - timedelta(seconds=1)
        assert store.enqueue([msg("x", past)], 0) == [Outcome.DUE_DUPLICATE]

    def test_a_batch_reports_one_outcome_per_message_in_order(self, harness: Harness) -> None:
        store = harness.store
        future = harness.now() + timedelta(minutes=5)
        past = harness.now() - timedelta(minutes=5)
        store.enqueue([msg("old", future)], 0)
        batch = [msg("n1", future), msg("p1", past), msg("old", future), msg("old2", past)]
        store.enqueue([msg("old2", future)], 0)
        assert store.enqueue(batch, 0) == [
            Outcome.INSERTED,
            Outcome.FIRE_NOW,
            Outcome.DUPLICATE,
            Outcome.DUE_DUPLICATE,
        ]
        assert store.enqueue([], 0) == []

    def test_a_fired_id_is_forgotten_and_can_be_scheduled_again(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        store.enqueue([msg("again", harness.now() + timedelta(milliseconds=500))], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        assert [r.id for r in rows] == ["again"]
        assert store.delete_fired(me, claims(rows)) == {"again"}
        later = harness.now() + timedelta(minutes=1)
        assert store.enqueue([msg("again", later)], 0) == [Outcome.INSERTED]

    def test_ids_up_to_128_characters_of_any_script_are_stored(self, harness: Harness) -> None:
        store = harness.store
        later = harness.now() + timedelta(minutes=1)
        ids = ["é" * 128, "😀" * 128, "a b ", "a b", "A"]
        assert store.enqueue([msg(i, later) for i in ids], 0) == [Outcome.INSERTED] * len(ids)
        for message_id in ids:
            stored = store.get_message(message_id)
            assert stored is not None and stored.id == message_id

    def test_extreme_deadlines(self, harness: Harness) -> None:
        store = harness.store
        first = datetime(1, 1, 1, tzinfo=UTC)
        last = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
        assert store.enqueue([msg("first", first), msg("last", last)], 0) == [
            Outcome.FIRE_NOW,
            Outcome.INSERTED,
        ]
        stored = store.get_message("last")
        assert stored is not None and stored.deadline == last
        assert store.claim(node(), HORIZON, 10, 5) == []

    def test_an_over_long_id_is_a_store_error(self, harness: Harness) -> None:
        with pytest.raises(StoreError) as raised:
            harness.store.enqueue([msg("x" * 129, harness.now() + timedelta(minutes=1))], 0)
        assert raised.value.retryable is False  # the data is refused: retrying cannot help

    # -------------------------------------------------------------------- byte-exact

    def test_keys_values_and_headers_round_trip_byte_exact(self, harness: Harness) -> None:
        store = harness.store
        every_byte = bytes(range(256))
        headers: Headers = [
            ("b", every_byte),
            ("none", None),
            ("empty", b""),
            ("b", b"\x00repeat"),
            ("ünï", "çödé".encode()),
        ]
        soon = harness.now() + timedelta(milliseconds=500)
        cases: dict[str, tuple[bytes | None, bytes | None, Headers]] = {
            "binary": (every_byte, every_byte[::-1], headers),
            "null-key": (None, b"{}", []),
            "tombstone": (b"key", None, [("h", None)]),
            "empty": (b"", b"", []),
        }
        store.enqueue(
            [msg(i, soon, key=k, value=v, headers=h) for i, (k, v, h) in cases.items()], 0
        )
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert set(rows) == set(cases)
        for message_id, (key, value, hdrs) in cases.items():
            assert rows[message_id].key == key, message_id
            assert rows[message_id].value == value, message_id
            assert rows[message_id].headers == hdrs, message_id

    def test_odd_header_names_and_values_round_trip_in_order(self, harness: Harness) -> None:
        """Names that JSON or a path expression would treat specially, repeats, long values,
        non-UTF-8 values, an empty value next to a null one: all come back as they went in,
        message by message, whatever the neighbours in the batch carry."""
        store = harness.store
        names = ['"quoted"', "back\\slash", "new\nline\ttab", "$[*].key", "{}", "", "é中😀"]
        long_value = bytes(range(256)) * 3  # base64 of it would be wrapped by some encoders
        odd: Headers = [(name, bytes([i]) * i + b"\xff\xfe") for i, name in enumerate(names)]
        odd += [("dup", None), ("dup", b""), ("dup", long_value), ("\x7f", b"\x00")]
        soon = harness.now() + timedelta(milliseconds=500)
        cases: dict[str, Headers] = {
            "none-before": [],
            "odd": odd,
            "none-between": [],
            "one-null": [("only", None)],
            "one-empty": [("only", b"")],
            "none-after": [],
        }
        store.enqueue([msg(i, soon, headers=h) for i, h in cases.items()], 0)
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert {i: rows[i].headers for i in cases} == cases

    def test_a_batch_whose_columns_are_all_null_or_empty(self, harness: Harness) -> None:
        """No key, no value, no header, no topic anywhere in the batch (and an empty batch)."""
        store = harness.store
        soon = harness.now() + timedelta(milliseconds=500)
        assert store.enqueue([], 0) == []
        batch = [msg(f"bare-{i}", soon, key=None, value=None) for i in range(3)]
        assert store.enqueue(batch, 0) == [Outcome.INSERTED] * 3
        rows = store.claim(node(), HORIZON, 10, 5)
        assert sorted((r.id, r.key, r.value, r.headers, r.target_topic) for r in rows) == [
            (f"bare-{i}", None, None, [], None) for i in range(3)
        ]
        empty = [msg(f"empty-{i}", soon, key=b"", value=b"") for i in range(2)]
        assert store.enqueue(empty, 0) == [Outcome.INSERTED] * 2
        rows = store.claim(node(), HORIZON, 10, 5)
        assert sorted((r.id, r.key, r.value) for r in rows) == [
            (f"empty-{i}", b"", b"") for i in range(2)
        ]

    # -------------------------------------------------------------------- claim

    def test_claim_takes_due_rows_oldest_first_up_to_the_limit(self, harness: Harness) -> None:
        store = harness.store
        now = harness.now()
        store.enqueue(
            [
                msg("third", now + timedelta(milliseconds=900)),
                msg("first", now + timedelta(milliseconds=300)),
                msg("later", now + timedelta(minutes=10)),
                msg("second", now + timedelta(milliseconds=600)),
            ],
            0,
        )
        me = node()
        first = store.claim(me, HORIZON + 500, 2, 5)
        assert [r.id for r in first] == ["first", "second"]
        assert [r.id for r in store.claim(me, HORIZON + 500, 10, 5)] == ["third"]
        assert store.claim(me, HORIZON + 500, 10, 5) == []  # "later" is beyond the horizon

    def test_claim_stops_at_its_byte_budget(self, harness: Harness) -> None:
        store = harness.store
        now = harness.now()
        store.enqueue(
            [
                msg(f"big{i}", now + timedelta(milliseconds=100 + i), key=None, value=b"x" * 1000)
                for i in range(6)
            ],
            0,
        )
        me = node()
        two = store.claim(me, HORIZON, 10, 5, max_bytes=2500)
        assert [r.id for r in two] == ["big0", "big1"]  # a third would pass 2,500 bytes
        assert store.claim(me, HORIZON, 10, 5, max_bytes=500, first_always=False) == []
        # Nothing held: one row is taken whatever its size, so a large message still fires.
        one = store.claim(me, HORIZON, 10, 5, max_bytes=500, first_always=True)
        assert [r.id for r in one] == ["big2"]
        assert [r.id for r in store.claim(me, HORIZON, 10, 5)] == ["big3", "big4", "big5"]

    def test_claim_reports_the_time_left_and_stamps_the_claim(self, harness: Harness) -> None:
        store = harness.store
        deadline = harness.now() + timedelta(milliseconds=800)
        store.enqueue([msg("t", deadline)], 0)
        me = node()
        before = harness.now()
        (row,) = store.claim(me, HORIZON, 10, 5)
        after = harness.now()
        assert row.deadline == pytest.approx(deadline.timestamp(), abs=1e-6)
        # Never more than what was left when the claim started, never less than at its end.
        assert (after - deadline).total_seconds() * -1000 - 1 <= row.remaining_ms
        assert row.remaining_ms <= (deadline - before).total_seconds() * 1000 + 1
        assert before <= row.readied_at <= after
        stored = store.get_message("t")
        assert stored is not None
        assert stored.readied_by == me
        assert stored.readied_at == row.readied_at

    def test_a_claimed_row_is_not_claimed_again(self, harness: Harness) -> None:
        store = harness.store
        store.enqueue([msg("once", harness.now() + timedelta(milliseconds=500))], 0)
        assert len(store.claim(node(), HORIZON, 10, 5)) == 1
        assert store.claim(node(), HORIZON, 10, 5) == []

    def test_concurrent_claims_never_share_a_row(self, harness: Harness) -> None:
        store = harness.store
        soon = harness.now() + timedelta(milliseconds=500)
        ids = [f"m{i:03d}" for i in range(300)]
        store.enqueue([msg(i, soon) for i in ids], 0)
        taken: dict[str, list[str]] = {}
        errors: list[BaseException] = []

        def worker() -> None:
            me = node()
            mine = taken.setdefault(me, [])
            try:
                while rows := store.claim(me, HORIZON, 7, 5):
                    mine.extend(r.id for r in rows)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
        everything = [i for mine in taken.values() for i in mine]
        assert sorted(everything) == ids  # each row exactly once

    def test_rows_that_failed_too_often_are_parked(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        store.enqueue([msg("bad", harness.now() + timedelta(milliseconds=500))], 0)
        for attempt in (1, 2):
            rows = store.claim(me, HORIZON, 10, 2)
            assert [r.attempts for r in rows] == [attempt - 1]
            assert store.release(me, claims(rows), failed=True, errors=["too large"]) == {
                "bad": attempt
            }
        assert store.claim(me, HORIZON, 10, 2) == []  # parked at two attempts
        (row,) = store.claim(me, HORIZON, 10, 3)
        assert row.attempts == 2
        assert row.last_error == "too large"

    def _park(self, harness: Harness, message_id: str, park_attempts: int = 2) -> None:
        """Enqueue a due message and fail its publish until ``release`` parks it."""
        store, me = harness.store, node()
        store.enqueue([msg(message_id, harness.now() + timedelta(milliseconds=500))], 0)
        for _ in range(park_attempts):
            rows = [r for r in store.claim(me, HORIZON, 100, park_attempts) if r.id == message_id]
            assert len(rows) == 1
            store.release(
                me, claims(rows), failed=True, errors=["refused"], park_attempts=park_attempts
            )

    def test_a_parked_row_stays_parked_when_the_threshold_rises(self, harness: Harness) -> None:
        """release stamps parked_at at the threshold: out of the claim until requeued, whatever
        park_attempts later claims pass (the claim walks the index of unparked rows)."""
        store = harness.store
        self._park(harness, "p")
        assert store.claim(node(), HORIZON, 10, 2) == []
        assert store.claim(node(), HORIZON, 10, 100) == []
        record = store.get_message("p")
        assert record is not None
        assert record.parked_at is not None
        assert record.state(100) == "parked"
        assert [m.id for m in store.list_messages(state="parked", park_attempts=100, limit=10)] == [
            "p"
        ]
        assert store.list_messages(state="waiting", park_attempts=100, limit=10) == []
        backlog = store.backlog(100)
        assert (backlog.parked, backlog.overdue) == (1, 0)

    def test_park_exhausted_stamps_rows_parked_by_attempts_alone(self, harness: Harness) -> None:
        """Rows an earlier release parked (attempts at the threshold, no parked_at)."""
        store, me = harness.store, node()
        store.enqueue([msg("old", harness.now() + timedelta(milliseconds=500))], 0)
        for _ in range(2):
            store.release(me, claims(store.claim(me, HORIZON, 10, 2)), failed=True)
        record = store.get_message("old")
        assert record is not None and record.parked_at is None and record.state(2) == "parked"
        assert store.park_exhausted(2) == 1
        assert store.park_exhausted(2) == 0
        record = store.get_message("old")
        assert record is not None and record.parked_at is not None

    def test_requeue_gives_a_parked_message_a_fresh_start(self, harness: Harness) -> None:
        store = harness.store
        self._park(harness, "p")
        store.enqueue([msg("w", harness.now() + timedelta(minutes=5))], 0)
        assert store.requeue_message("ghost", 2) is RequeueOutcome.NOT_FOUND
        assert store.requeue_message("w", 2) is RequeueOutcome.NOT_PARKED
        assert store.requeue_message("p", 2) is RequeueOutcome.REQUEUED
        assert store.requeue_message("p", 2) is RequeueOutcome.NOT_PARKED
        record = store.get_message("p")
        assert record is not None
        assert (record.attempts, record.parked_at, record.last_error) == (0, None, None)
        assert record.state(2) == "waiting"
        me = node()
        (row,) = store.claim(me, HORIZON, 10, 2)
        assert (row.id, row.attempts) == ("p", 0)
        assert store.requeue_message("p", 2) is RequeueOutcome.NOT_PARKED  # claimed

    def test_requeue_takes_rows_parked_by_attempts_alone(self, harness: Harness) -> None:
        store, me = harness.store, node()
        store.enqueue([msg("old", harness.now() + timedelta(milliseconds=500))], 0)
        for _ in range(2):
            store.release(me, claims(store.claim(me, HORIZON, 10, 2)), failed=True)
        assert store.requeue_message("old", 2) is RequeueOutcome.REQUEUED
        assert [r.id for r in store.claim(me, HORIZON, 10, 2)] == ["old"]

    def test_reschedule_moves_a_waiting_message_only(self, harness: Harness) -> None:
        """The admin reschedule: a waiting row gets the new deadline (given, or now + delay on
        the store's clock) and keeps its payload; claimed and parked rows are left alone."""
        store = harness.store
        self._park(harness, "p")
        later = harness.now() + timedelta(minutes=5)
        store.enqueue([msg("w", later, value=b"payload"), msg("c", later)], 0)
        target = harness.now() + timedelta(hours=2)
        assert store.reschedule_message("ghost", 2, deadline=target) == (
            RescheduleOutcome.NOT_FOUND,
            None,
        )
        outcome, record = store.reschedule_message("w", 2, deadline=target)
        assert outcome is RescheduleOutcome.RESCHEDULED
        assert record is not None and (record.id, record.deadline) == ("w", target)
        stored = store.get_message("w", include_value=True)
        assert stored is not None
        assert (stored.deadline, stored.value, stored.state(2)) == (target, b"payload", "waiting")
        before = harness.now()
        outcome, record = store.reschedule_message("w", 2, delay_ms=FAR)
        assert outcome is RescheduleOutcome.RESCHEDULED and record is not None
        assert before + timedelta(hours=1) <= record.deadline <= harness.now() + timedelta(hours=1)
        assert store.reschedule_message("p", 2, deadline=target) == (RescheduleOutcome.PARKED, None)
        self._claim_one(harness, "c")
        assert store.reschedule_message("c", 2, deadline=target) == (
            RescheduleOutcome.CLAIMED,
            None,
        )
        with pytest.raises(ValueError, match="exactly one"):
            store.reschedule_message("w", 2)

    def test_a_message_rescheduled_into_the_past_is_claimed_at_once(self, harness: Harness) -> None:
        store, me = harness.store, node()
        store.enqueue([msg("x", harness.now() + timedelta(minutes=5))], 0)
        assert store.claim(me, HORIZON, 10, 2) == []
        outcome, _ = store.reschedule_message("x", 2, delay_ms=0)
        assert outcome is RescheduleOutcome.RESCHEDULED
        assert [r.id for r in store.claim(me, HORIZON, 10, 2)] == ["x"]

    def _claim_one(self, harness: Harness, message_id: str) -> None:
        """Make ``message_id`` due (by rescheduling it to now) and claim it."""
        store, me = harness.store, node()
        store.reschedule_message(message_id, 2, delay_ms=0)
        assert [r.id for r in store.claim(me, HORIZON, 10, 2)] == [message_id]

    # -------------------------------------------------------------------- delete (phase 2)

    def test_delete_is_fenced_by_the_claim(self, harness: Harness) -> None:
        store = harness.store
        me, peer = node(), node()
        store.enqueue([msg("f", harness.now() + timedelta(milliseconds=500))], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        assert store.delete_fired(peer, claims(rows)) == set()
        stale = [("f", rows[0].readied_at - timedelta(microseconds=1))]
        assert store.delete_fired(me, stale) == set()
        assert store.get_message("f") is not None
        assert store.delete_fired(me, claims(rows)) == {"f"}
        assert store.get_message("f") is None
        assert store.delete_fired(me, claims(rows)) == set()  # already gone: nothing
        assert store.delete_fired(me, []) == set()

    def test_a_row_a_peer_took_over_is_not_deleted_by_the_old_owner(self, harness: Harness) -> None:
        store = harness.store
        slow, peer = node(), node()
        store.enqueue([msg("t", harness.now() + timedelta(milliseconds=500))], 0)
        old = store.claim(slow, HORIZON, 10, 5)
        harness.advance(300)
        stuck = store.find_stuck(200, 10)
        assert [(s.id, s.readied_by) for s in stuck] == [("t", slow)]
        assert store.reset_stuck(stuck) == [("t", slow)]
        new = store.claim(peer, HORIZON, 10, 5)
        assert [r.id for r in new] == ["t"]
        assert store.delete_fired(slow, claims(old)) == set()
        assert store.delete_fired(peer, claims(new)) == {"t"}

    # -------------------------------------------------------------------- release

    def test_release_gives_rows_back_fenced_counting_failures(self, harness: Harness) -> None:
        store = harness.store
        me, peer = node(), node()
        store.enqueue(
            [msg(i, harness.now() + timedelta(milliseconds=500)) for i in ("a", "b", "c")], 0
        )
        rows = store.claim(me, HORIZON, 10, 5)
        assert store.release(peer, claims(rows), failed=True) == {}
        assert store.release(me, claims(rows)[:1], failed=False) == {"a": 0}
        assert store.release(me, claims(rows)[1:2], failed=True, errors=["boom"]) == {"b": 1}
        b = store.get_message("b")
        assert b is not None
        assert (b.readied_at, b.readied_by, b.attempts, b.last_error) == (None, None, 1, "boom")
        c = store.get_message("c")
        assert c is not None
        assert c.readied_by == me  # untouched
        assert sorted(r.id for r in store.claim(peer, HORIZON, 10, 5)) == ["a", "b"]
        assert store.release(me, [], failed=False) == {}

    def test_release_without_an_error_keeps_the_last_one(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        store.enqueue([msg("e", harness.now() + timedelta(milliseconds=500))], 0)
        store.release(me, claims(store.claim(me, HORIZON, 1, 5)), failed=True, errors=["first"])
        store.release(me, claims(store.claim(me, HORIZON, 1, 5)), failed=False)
        e = store.get_message("e")
        assert e is not None
        assert (e.attempts, e.last_error) == (1, "first")

    def test_release_node_gives_back_every_claim_of_that_node_only(self, harness: Harness) -> None:
        store = harness.store
        me, peer = node(), node()
        store.enqueue(
            [msg(f"r{i}", harness.now() + timedelta(milliseconds=500)) for i in range(4)], 0
        )
        store.claim(me, HORIZON, 3, 5)
        store.claim(peer, HORIZON, 3, 5)
        assert store.release_node(me) == 3
        assert store.release_node(me) == 0
        claimed = store.list_messages(state="claimed", park_attempts=5, limit=10)
        assert [(m.id, m.readied_by) for m in claimed] == [("r3", peer)]

    def test_release_node_is_fenced_by_the_process_start(self, harness: Harness) -> None:
        """Two processes sharing a node id: the later one's release leaves the earlier claims."""
        store = harness.store
        me = node()
        store.enqueue(
            [msg(f"f{i}", harness.now() + timedelta(milliseconds=500)) for i in range(4)], 0
        )
        earlier = store.claim(me, HORIZON, 2, 5)
        harness.advance(50)
        since = store.register_node(me, 10.0, hostname="h", version="v")
        assert since is not None
        later = store.claim(me, HORIZON, 2, 5)
        assert store.release_node(me, since) == 2
        claimed = store.list_messages(state="claimed", park_attempts=5, limit=10)
        assert sorted(m.id for m in claimed) == sorted(r.id for r in earlier)
        assert {r.id for r in later}.isdisjoint(m.id for m in claimed)

    def test_a_node_id_held_by_a_live_node_is_refused(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        first = store.register_node(me, 10.0, hostname="a", version="v")
        assert first is not None
        assert store.register_node(me, 10.0, hostname="b", version="v") is None
        harness.advance(300)
        # Once its heartbeat is older than the liveness window, the id may be taken again.
        again = store.register_node(me, 0.2, hostname="b", version="v")
        assert again is not None and again > first
        assert store.register_node(node(), 10.0, hostname="c", version="v") is not None

    # -------------------------------------------------------------------- failure detection

    def test_a_node_never_finds_its_own_claims_stuck(self, harness: Harness) -> None:
        store = harness.store
        me, dead = node(), node()
        store.enqueue(
            [msg(f"o{i}", harness.now() + timedelta(milliseconds=500)) for i in range(3)], 0
        )
        before_start = store.claim(me, HORIZON, 1, 5)  # an earlier process with the same id
        harness.advance(50)
        since = store.register_node(me, 10.0, hostname="h", version="v")
        mine = store.claim(me, HORIZON, 1, 5)
        theirs = store.claim(dead, HORIZON, 1, 5)
        harness.advance(300)
        assert {s.id for s in store.find_stuck(200, 10)} == {
            r.id for r in before_start + mine + theirs
        }
        own = {s.id for s in store.find_stuck(200, 10, (me, since))}
        assert own == {r.id for r in before_start + theirs}
        assert {s.id for s in store.find_stuck(200, 10, (me, None))} == {r.id for r in theirs}

    def test_only_claims_older_than_the_hold_time_are_stuck(self, harness: Harness) -> None:
        store = harness.store
        dead = node()
        store.enqueue(
            [msg(f"s{i}", harness.now() + timedelta(milliseconds=500)) for i in range(3)], 0
        )
        store.enqueue([msg("unclaimed", harness.now() + timedelta(minutes=10))], 0)
        first = store.claim(dead, HORIZON, 2, 5)
        harness.advance(300)
        second = store.claim(dead, HORIZON, 1, 5)
        assert store.find_stuck(5_000, 10) == []
        stuck = store.find_stuck(200, 10)
        assert [s.id for s in stuck] == [r.id for r in first]  # oldest claims first
        assert all(s.readied_by == dead for s in stuck)
        assert [s.readied_at for s in stuck] == [r.readied_at for r in first]
        assert len(store.find_stuck(200, 1)) == 1
        harness.advance(300)
        assert {s.id for s in store.find_stuck(200, 10)} == {r.id for r in first + second}

    def test_reset_only_touches_the_claim_it_observed(self, harness: Harness) -> None:
        store = harness.store
        dead, peer = node(), node()
        store.enqueue([msg(i, harness.now() + timedelta(milliseconds=500)) for i in "xy"], 0)
        store.claim(dead, HORIZON, 10, 5)
        harness.advance(300)
        stuck = store.find_stuck(200, 10)
        assert {s.id for s in stuck} == {"x", "y"}
        # Meanwhile another detector reset "x" and a peer claimed it again.
        x = next(s for s in stuck if s.id == "x")
        assert store.reset_stuck([x]) == [("x", dead)]
        assert [r.id for r in store.claim(peer, HORIZON, 1, 5)] == ["x"]
        # The first detector's reset now only touches "y": "x" belongs to the peer.
        assert store.reset_stuck(stuck) == [("y", dead)]
        x_now = store.get_message("x")
        assert x_now is not None
        assert x_now.readied_by == peer
        assert store.reset_stuck([]) == []
        ghost = StuckRow("ghost", dead, stuck[0].readied_at)
        assert store.reset_stuck([ghost]) == []

    # -------------------------------------------------------------------- leadership

    def test_the_leader_is_the_lowest_node_with_a_heartbeat_younger_than_the_window(
        self, harness: Harness
    ) -> None:
        store = harness.store
        low, high = (str(u) for u in sorted(uuid.UUID(node()) for _ in range(2)))
        assert store.elect_leader(800) is None
        store.heartbeat(high)
        assert store.elect_leader(800) == high
        store.heartbeat(low)
        assert store.elect_leader(800) == low
        harness.advance(500)
        store.heartbeat(high)
        assert store.elect_leader(800) == low  # low's heartbeat lapsed by window - 300 ms
        harness.advance(500)
        assert store.elect_leader(800) == high  # by window + 200 ms: dead
        harness.advance(500)
        assert store.elect_leader(800) is None

    def test_claims_of_a_node_whose_heartbeat_lapsed_are_taken_over(self, harness: Harness) -> None:
        store = harness.store
        dead, live, me, ghost = node(), node(), node(), node()
        due = harness.now() + timedelta(milliseconds=500)
        store.enqueue([msg(f"m{i}", due + timedelta(milliseconds=i)) for i in range(7)], 0)
        for n in (dead, live, me):
            store.heartbeat(n)
        first = store.claim(dead, HORIZON, 2, 5)  # oldest claims first
        store.claim(live, HORIZON, 1, 5)
        store.claim(me, HORIZON, 1, 5)
        store.claim(ghost, HORIZON, 1, 5)  # no heartbeat row: left to the hold time
        harness.advance(100)
        second = store.claim(dead, HORIZON, 2, 5)
        harness.advance(500)
        store.heartbeat(live)
        # dead's heartbeat lapsed by 600 ms: window - 200 ms, not dead yet.
        assert store.reset_lapsed_claims(800, me, 10) == []
        harness.advance(400)
        # By 1000 ms: window + 200 ms. Never the caller's own claims, never a live node's.
        taken = store.reset_lapsed_claims(800, me, 3)
        assert taken == [(r.id, dead) for r in first + second[:1]]
        assert store.reset_lapsed_claims(800, me, 10) == [(second[1].id, dead)]
        assert store.reset_lapsed_claims(800, me, 10) == []
        assert sorted(r.readied_by or "" for r in _claimed(store)) == sorted([live, me, ghost])
        # A dead node's claim a peer re-claimed since belongs to the peer: left alone.
        assert [r.id for r in store.claim(live, HORIZON, 1, 5)] == [first[0].id]
        assert store.reset_lapsed_claims(800, me, 10) == []

    # -------------------------------------------------------------------- admin basics

    def test_cancel_deletes_a_waiting_message_but_not_a_claimed_one(self, harness: Harness) -> None:
        store = harness.store
        store.enqueue([msg(i, harness.now() + timedelta(milliseconds=500)) for i in "wc"], 0)
        store.claim(node(), HORIZON, 1, 5)  # claims "w" or "c": both due at the same instant
        claimed = store.list_messages(state="claimed", park_attempts=5, limit=10)[0].id
        waiting = "c" if claimed == "w" else "w"
        assert store.cancel_message(claimed) is CancelOutcome.CLAIMED
        assert store.cancel_message(waiting) is CancelOutcome.CANCELLED
        assert store.cancel_message(waiting) is CancelOutcome.NOT_FOUND
        assert store.get_message(waiting) is None

    def test_list_messages_pages_by_deadline_then_id(self, harness: Harness) -> None:
        store = harness.store
        base = harness.now() + timedelta(minutes=5)
        store.enqueue([msg(f"p{i}", base + timedelta(seconds=i // 2)) for i in range(6)], 0)
        page1 = store.list_messages(state="waiting", park_attempts=5, limit=4)
        assert [m.id for m in page1] == ["p0", "p1", "p2", "p3"]
        cursor = (page1[-1].deadline, page1[-1].id)
        page2 = store.list_messages(state="waiting", park_attempts=5, limit=4, after=cursor)
        assert [m.id for m in page2] == ["p4", "p5"]
        assert all(m.value is None and m.value_size == 1 for m in page1 + page2)
        with pytest.raises(ValueError):
            store.list_messages(state="bogus", park_attempts=5, limit=1)

    def test_ping_returns_the_store_clock(self, harness: Harness) -> None:
        before = harness.now()
        assert harness.store.ping() >= before
