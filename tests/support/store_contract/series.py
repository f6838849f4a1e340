"""The store contract of a series whose occurrence is claimed when a reschedule or a cancel
arrives ("delete or advance"): a replacement is never deleted by the fired occurrence's delete,
a cancel that followed it wins, and a replacement claimed again at once is advanced like any
occurrence (a claim is never older than the row it claims)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from chronos.protocol import Action, ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import CancelOutcome, MessageFilter, Outcome
from tests.support.store_contract.common import HORIZON, Harness, claims, node

EVERY = Rule(every_ms=1_000).encode()
HOURLY = Rule(every_ms=3_600_000).encode()


def series(
    message_id: str,
    deadline: datetime,
    value: bytes = b"v1",
    rule: str | None = EVERY,
    action: Action = Action.SCHEDULE,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, b"k", value, [], action, recurrence=rule)


def cancel_claimed(harness: Harness, message_id: str, via: str, cancel_ttl_ms: int) -> None:
    """Cancel a claimed message by a Kafka cancel, the admin API's or a bulk cancel by filter:
    each answers that the message is claimed (it may be firing)."""
    store = harness.store
    if via == "kafka":
        cancel = ScheduledMessage(message_id, harness.now(), None, None, [], Action.CANCEL)
        assert store.enqueue([cancel], 0, cancel_ttl_ms) == [Outcome.CANCEL_CLAIMED]
    elif via == "admin":
        assert store.cancel_message(message_id, cancel_ttl_ms) is CancelOutcome.CLAIMED
    else:
        where = MessageFilter(id_prefix=message_id)
        done = store.bulk_cancel(where, park_attempts=5, cancel_ttl_ms=cancel_ttl_ms)
        assert (done.done, done.claimed) == (0, 1)


class SeriesContract:
    """Subclasses provide a ``harness`` fixture."""

    @pytest.mark.parametrize("rule", [HOURLY, None], ids=["series", "one-shot"])
    def test_a_replacement_of_a_claimed_last_occurrence_survives_its_delete_and_fires(
        self, harness: Harness, rule: str | None
    ) -> None:
        # The claimed occurrence is the series' last (its until): the firing loop's delete has
        # no next occurrence for it. The reschedule that replaced the row meanwhile is a new
        # message (a series or a one-shot one): given back, never deleted.
        store, me = harness.store, node()
        at = harness.now() + timedelta(milliseconds=300)
        last = Rule(every_ms=1_000, until=at).encode()
        store.enqueue([series("s", at, rule=last)], 0)
        (row,) = store.claim(me, HORIZON, 10, 5)
        later = harness.now() + timedelta(milliseconds=600)
        replacement = series("s", later, b"v2", rule, Action.RESCHEDULE)
        assert store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
        assert store.delete_fired(me, claims([row]), [None]) == {"s"}
        stored = store.get_message("s", include_value=True)
        assert stored is not None
        assert (stored.deadline, stored.readied_at, stored.value) == (later, None, b"v2")
        assert stored.recurrence == rule
        (again,) = store.claim(me, HORIZON, 10, 5)  # it fires: claimed like any due row
        assert (again.id, again.value, again.recurrence) == ("s", b"v2", rule)

    @pytest.mark.parametrize("via", ["kafka", "admin", "bulk"])
    @pytest.mark.parametrize("has_next", [True, False], ids=["next", "last"])
    def test_a_series_replaced_then_cancelled_while_claimed_ends_with_its_occurrence(
        self, harness: Harness, has_next: bool, via: str
    ) -> None:
        store, me = harness.store, node()
        at = harness.now() + timedelta(milliseconds=300)
        store.enqueue([series("s", at)], 0)
        (row,) = store.claim(me, HORIZON, 10, 5)
        later = harness.now() + timedelta(milliseconds=600)
        replacement = series("s", later, b"v2", HOURLY, Action.RESCHEDULE)
        assert store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
        cancel_claimed(harness, "s", via, 60_000)
        # The occurrence in flight is delivered: the cancel wins over the replacement.
        nexts = [at + timedelta(seconds=1) if has_next else None]
        assert store.delete_fired(me, claims([row]), nexts) == {"s"}
        assert store.get_message("s") is None
        assert store.claim(me, HORIZON, 10, 5) == []

    @pytest.mark.parametrize("via", ["kafka", "admin", "bulk"])
    @pytest.mark.parametrize("has_next", [True, False], ids=["next", "last"])
    @pytest.mark.parametrize("rule", [HOURLY, None], ids=["series", "one-shot"])
    def test_a_replaced_series_cancelled_while_claimed_ends_on_its_row_not_only_its_marker(
        self, harness: Harness, rule: str | None, has_next: bool, via: str
    ) -> None:
        # The fired occurrence's delete may read the cancel markers as they were before the
        # cancel (Postgres: its statement began first, then waited for the row the cancel held:
        # test_store_concurrency). Here the marker has expired when the delete comes: the row
        # itself must say that the series ended and that the replacement is void, whatever
        # path the cancel took and whether the replacement is a series or a one-shot message.
        store, me = harness.store, node()
        at = harness.now() + timedelta(milliseconds=300)
        store.enqueue([series("s", at)], 0)
        (row,) = store.claim(me, HORIZON, 10, 5)
        later = harness.now() + timedelta(milliseconds=600)
        replacement = series("s", later, b"v2", rule, Action.RESCHEDULE)
        assert store.enqueue([replacement], 0) == [Outcome.RESCHEDULED]
        cancel_claimed(harness, "s", via, 1)
        stored = store.get_message("s")
        assert stored is not None and stored.recurrence is None  # the series ends
        harness.advance(50)  # the marker is gone: only the row speaks
        nexts = [at + timedelta(seconds=1) if has_next else None]
        assert store.delete_fired(me, claims([row]), nexts) == {"s"}
        assert store.get_message("s") is None  # deleted: the replacement never fires
        assert store.claim(me, HORIZON, 10, 5) == []

    def test_a_replacement_given_back_and_claimed_again_at_once_advances(
        self, harness: Harness
    ) -> None:
        # No time passes between the steps (the in-memory clock stands still; Postgres is fast):
        # the second claim is after the reschedule, so its occurrence is not "replaced" again.
        store, me = harness.store, node()
        at = harness.now() + timedelta(milliseconds=300)
        store.enqueue([series("s", at)], 0)
        (row,) = store.claim(me, HORIZON, 10, 5)
        soon = at + timedelta(milliseconds=100)
        assert store.enqueue([series("s", soon, b"v2", action=Action.RESCHEDULE)], 0) == [
            Outcome.RESCHEDULED
        ]
        assert store.delete_fired(me, claims([row]), [at + timedelta(seconds=1)]) == {"s"}
        (again,) = store.claim(me, HORIZON, 10, 5)
        assert again.value == b"v2"
        following = soon + timedelta(seconds=1)
        assert store.delete_fired(me, claims([again]), [following]) == {"s"}
        stored = store.get_message("s")
        assert stored is not None
        assert (stored.deadline, stored.readied_at) == (following, None)
