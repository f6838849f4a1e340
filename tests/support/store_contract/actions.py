"""The store contract of chronosAction (reschedule, cancel, cancel markers) and chronosTopic, run
like ``StoreContract`` against the in-memory store and the real Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronos.protocol import Action, ScheduledMessage
from chronos.store import CancelOutcome, Outcome
from tests.support.store_contract.common import HORIZON, Harness, claims, msg, node

ADVANCE = 50
TTL = 60_000


def act(
    action: Action,
    message_id: str,
    deadline: datetime,
    value: bytes | None = b"v",
    topic: str | None = None,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, b"k", value, [("h", b"1")], action, topic)


def cancel(message_id: str, now: datetime) -> ScheduledMessage:
    return ScheduledMessage(message_id, now, None, None, [], Action.CANCEL)


class ActionContract:
    def test_cancel_deletes_a_waiting_message(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg("a", now + timedelta(hours=1))], ADVANCE)
        assert store.enqueue([cancel("a", now)], ADVANCE, TTL) == [Outcome.CANCELLED]
        assert store.get_message("a") is None

    def test_cancel_of_an_unknown_id_blocks_its_later_schedule(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        assert store.enqueue([cancel("a", now)], ADVANCE, TTL) == [Outcome.CANCEL_UNKNOWN]
        later = [msg("a", now + timedelta(hours=1)), msg("b", now + timedelta(hours=1))]
        assert store.enqueue(later, ADVANCE, TTL) == [Outcome.BLOCKED, Outcome.INSERTED]
        # a lapsed schedule of a cancelled id is not fired either
        assert store.enqueue([msg("a", now - timedelta(seconds=1))], ADVANCE) == [Outcome.BLOCKED]
        assert store.enqueue([act(Action.RESCHEDULE, "a", now + timedelta(hours=2))], ADVANCE) == [
            Outcome.BLOCKED
        ]
        assert store.get_message("a") is None

    def test_a_cancel_marker_expires_and_is_purged(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([cancel("a", now)], ADVANCE, 300)
        harness.advance(600)
        assert store.enqueue([msg("a", harness.now() + timedelta(hours=1))], ADVANCE) == [
            Outcome.INSERTED
        ]

    def test_cancel_of_a_claimed_message_leaves_it(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg("a", now + timedelta(milliseconds=200))], ADVANCE)
        owner = node()
        assert [r.id for r in store.claim(owner, HORIZON, 10, 10)] == ["a"]
        assert store.enqueue([cancel("a", now)], ADVANCE, TTL) == [Outcome.CANCEL_CLAIMED]
        record = store.get_message("a")
        assert record is not None and record.readied_at is not None

    @pytest.mark.parametrize(
        "claim_ends_by", ["release", "failed_publish", "release_node", "reset_stuck", "lapsed_node"]
    )
    def test_a_cancel_that_arrives_while_claimed_wins_when_the_claim_ends(
        self, harness: Harness, claim_ends_by: str
    ) -> None:
        """Given back (shutdown, failed publish), taken over (hold time, lapsed heartbeat): the
        row of a message cancelled while it was claimed is deleted, never claimed again."""
        store, now = harness.store, harness.now()
        store.enqueue(
            [
                msg("a", now + timedelta(milliseconds=200)),
                msg("b", now + timedelta(milliseconds=200)),
            ],
            ADVANCE,
        )
        owner = node()
        store.heartbeat(owner)
        rows = {r.id: r for r in store.claim(owner, HORIZON, 10, 10)}
        assert sorted(rows) == ["a", "b"]
        assert store.enqueue([cancel("a", now)], ADVANCE, TTL) == [Outcome.CANCEL_CLAIMED]
        claims_ = [(r.id, r.readied_at) for r in rows.values()]
        if claim_ends_by == "release":
            store.release(owner, claims_, failed=False)
        elif claim_ends_by == "failed_publish":
            store.release(owner, claims_, failed=True, errors=["refused", "refused"])
        elif claim_ends_by == "release_node":
            store.release_node(owner)
        elif claim_ends_by == "reset_stuck":
            harness.advance(600)
            stuck = store.find_stuck(400, 10)
            assert sorted(s.id for s in stuck) == ["a", "b"]
            store.reset_stuck(stuck)
        else:
            harness.advance(600)  # the owner's heartbeat lapses
            other = node()
            store.heartbeat(other)
            store.reset_lapsed_claims(400, other, 10)
        assert store.get_message("a") is None, "the cancelled message was given back"
        again = store.claim(node(), HORIZON, 10, 10)
        assert [r.id for r in again] == ["b"]

    def test_an_admin_cancel_leaves_the_marker_a_kafka_cancel_does(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        later = now + timedelta(hours=1)
        store.enqueue([msg("w", later)], ADVANCE)
        assert store.cancel_message("w", TTL) is CancelOutcome.CANCELLED
        assert store.cancel_message("ghost", TTL) is CancelOutcome.NOT_FOUND
        # A schedule of either id arriving meanwhile (another partition, a retry) is dropped.
        assert store.enqueue([msg("w", later), msg("ghost", later)], ADVANCE, TTL) == [
            Outcome.BLOCKED,
            Outcome.BLOCKED,
        ]
        store.enqueue([msg("c", now + timedelta(milliseconds=200))], ADVANCE)
        owner = node()
        (row,) = store.claim(owner, HORIZON, 10, 10)
        assert store.cancel_message("c", TTL) is CancelOutcome.CLAIMED
        store.release(owner, [(row.id, row.readied_at)], failed=False)
        assert store.get_message("c") is None

    def test_reschedule_replaces_a_waiting_message(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg("a", now + timedelta(hours=1), value=b"old")], ADVANCE)
        new = act(Action.RESCHEDULE, "a", now + timedelta(milliseconds=500), b"new", "elsewhere")
        assert store.enqueue([new], ADVANCE) == [Outcome.RESCHEDULED]
        rows = store.claim(node(), HORIZON, 10, 10)
        assert [(r.id, r.value, r.headers, r.target_topic) for r in rows] == [
            ("a", b"new", [("h", b"1")], "elsewhere")
        ]

    def test_reschedule_of_an_unknown_id_inserts_it(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        new = act(Action.RESCHEDULE, "a", now + timedelta(hours=1))
        assert store.enqueue([new], ADVANCE) == [Outcome.RESCHEDULED]
        record = store.get_message("a")
        assert record is not None and record.deadline == new.deadline

    def test_reschedule_of_a_claimed_message_changes_nothing(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg("a", now + timedelta(milliseconds=200), value=b"old")], ADVANCE)
        owner = node()
        claimed = store.claim(owner, HORIZON, 10, 10)
        new = act(Action.RESCHEDULE, "a", now + timedelta(hours=1), b"new")
        assert store.enqueue([new], ADVANCE) == [Outcome.RESCHEDULE_CLAIMED]
        assert store.delete_fired(owner, claims(claimed)) == {"a"}

    def test_a_mixed_batch_reports_each_outcome_in_order(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg("w", now + timedelta(hours=1))], ADVANCE)
        batch = [
            msg("s", now + timedelta(hours=1)),
            cancel("w", now),
            act(Action.RESCHEDULE, "r", now + timedelta(hours=1)),
            cancel("u", now),
            msg("s2", now + timedelta(hours=1), value=None),
        ]
        assert store.enqueue(batch, ADVANCE, TTL) == [
            Outcome.INSERTED,
            Outcome.CANCELLED,
            Outcome.RESCHEDULED,
            Outcome.CANCEL_UNKNOWN,
            Outcome.INSERTED,
        ]

    def test_target_topic_is_stored_and_claimed(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([act(Action.SCHEDULE, "a", now + timedelta(milliseconds=300), topic="t1")], 0)
        assert [r.target_topic for r in store.claim(node(), HORIZON, 10, 10)] == ["t1"]
