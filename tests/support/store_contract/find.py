"""The store contract of the operators' statements: find by filter, count, bulk cancel and
bulk reschedule (fire now included)."""

from __future__ import annotations

from datetime import datetime, timedelta

from chronos.protocol import ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import MessageFilter
from tests.support.store_contract.common import HORIZON, Harness, claim_one, msg, node, park


def _message(
    message_id: str,
    deadline: datetime,
    *,
    tenant: str = "",
    topic: str | None = None,
    key: bytes | None = b"k",
    every_ms: int | None = None,
) -> ScheduledMessage:
    return ScheduledMessage(
        message_id,
        deadline,
        key,
        b"v",
        [],
        target_topic=topic,
        tenant=tenant,
        recurrence=None if every_ms is None else Rule(every_ms=every_ms).encode(),
    )


def _ids(rows: list) -> list[str]:  # type: ignore[type-arg]
    return [r.id for r in rows]


class FindContract:
    """Subclasses provide a ``harness`` fixture."""

    def _fill(self, harness: Harness) -> datetime:
        base = harness.now() + timedelta(minutes=10)
        harness.store.enqueue(
            [
                _message("acme-1", base, tenant="acme", key=b"user:1"),
                _message("acme-2", base + timedelta(seconds=1), tenant="acme", key=b"user:2"),
                _message("beta-1", base + timedelta(seconds=2), tenant="beta", topic="other"),
                _message("beta-2", base + timedelta(seconds=3), tenant="beta", key=b"\xff\x00"),
                _message("tick", base + timedelta(seconds=4), every_ms=60_000, key=None),
                _message("a%_1", base + timedelta(seconds=5), key=b"user:1"),
            ],
            0,
        )
        return base

    def _find(self, harness: Harness, **filters: object) -> list[str]:
        where = MessageFilter(**filters)  # type: ignore[arg-type]
        return _ids(harness.store.find_messages(where, park_attempts=2, limit=100))

    def test_find_filters_by_each_field(self, harness: Harness) -> None:
        base = self._fill(harness)
        assert self._find(harness, tenant="acme") == ["acme-1", "acme-2"]
        assert self._find(harness, tenant="") == ["tick", "a%_1"]
        assert self._find(harness, topic="other") == ["beta-1"]
        assert self._find(harness, topic="out", topic_unset=True) == [
            "acme-1",
            "acme-2",
            "beta-2",
            "tick",
            "a%_1",
        ]
        assert self._find(harness, id_prefix="beta-") == ["beta-1", "beta-2"]
        assert self._find(harness, id_prefix="a%_") == ["a%_1"]  # no wildcards in a prefix
        assert self._find(harness, id_prefix="a%") == ["a%_1"]
        assert self._find(harness, key=b"user:1") == ["acme-1", "a%_1"]
        assert self._find(harness, key=b"user:", key_prefix=True) == ["acme-1", "acme-2", "a%_1"]
        assert self._find(harness, key=b"user:") == []
        assert self._find(harness, key=b"\xff", key_prefix=True) == ["beta-2"]
        assert self._find(harness, recurring=True) == ["tick"]
        assert len(self._find(harness, recurring=False)) == 5
        assert self._find(
            harness,
            deadline_from=base + timedelta(seconds=1),
            deadline_to=base + timedelta(seconds=3),
        ) == ["acme-2", "beta-1"]
        assert self._find(harness, tenant="beta", key=b"k") == ["beta-1"]

    def test_find_by_state_pages_and_records_tenant(self, harness: Harness) -> None:
        store = harness.store
        park(harness, "parked-1")
        self._fill(harness)
        claim_one(harness, "beta-1")
        assert self._find(harness, state="claimed") == ["beta-1"]
        assert self._find(harness, state="parked") == ["parked-1"]
        assert "beta-1" not in self._find(harness, state="waiting")
        everything = self._find(harness)
        assert set(everything[:2]) == {"parked-1", "beta-1"} and len(everything) == 7
        where = MessageFilter()
        page = store.find_messages(where, park_attempts=2, limit=3)
        rest = store.find_messages(
            where, park_attempts=2, limit=10, after=(page[-1].deadline, page[-1].id)
        )
        assert _ids(page) + _ids(rest) == everything
        acme = store.find_messages(MessageFilter(tenant="acme"), park_attempts=2, limit=1)
        assert (acme[0].tenant, acme[0].key, acme[0].value) == ("acme", b"user:1", None)

    def test_count_is_exact_below_its_limit_and_an_estimate_past_it(self, harness: Harness) -> None:
        self._fill(harness)
        store = harness.store
        assert store.count_messages(MessageFilter(tenant="acme"), park_attempts=2, count_limit=10)
        counted = store.count_messages(MessageFilter(), park_attempts=2, count_limit=10)
        assert (counted.count, counted.exact) == (6, True)
        capped = store.count_messages(MessageFilter(), park_attempts=2, count_limit=4)
        # Past the limit: an estimate, marked as one (a table this small is sampled whole:
        # the estimate is the count).
        assert (capped.count, capped.exact) == (6, False)

    def test_bulk_cancel_in_batches_leaves_markers_and_spares_claimed_rows(
        self, harness: Harness
    ) -> None:
        store = harness.store
        self._fill(harness)
        claim_one(harness, "acme-2")
        where = MessageFilter(tenant="acme")
        first = store.bulk_cancel(where, park_attempts=2, batch=1)  # acme-2: due now, claimed
        assert (first.done, first.claimed) == (0, 1) and first.after is not None
        second = store.bulk_cancel(where, park_attempts=2, batch=1, after=first.after)
        assert (second.done, second.claimed) == (1, 0)
        assert store.get_message("acme-1") is None
        assert store.get_message("acme-2") is not None  # claimed: left to fire
        last = store.bulk_cancel(where, park_attempts=2, batch=1, after=second.after)
        assert (last.done, last.after) == (0, None)
        # the markers drop a schedule of a cancelled id arriving later, as a Kafka cancel's do
        later = harness.now() + timedelta(minutes=30)
        assert store.enqueue([msg("acme-1", later)], 0)[0].value == "blocked"
        again = store.bulk_cancel(where, park_attempts=2)  # safe to repeat
        assert (again.done, again.after) == (0, None)
        assert self._find(harness, tenant="beta") == ["beta-1", "beta-2"]

    def test_bulk_cancel_ends_a_claimed_series(self, harness: Harness) -> None:
        store = harness.store
        self._fill(harness)
        claim_one(harness, "tick")
        result = store.bulk_cancel(MessageFilter(recurring=True), park_attempts=2)
        assert (result.done, result.claimed) == (0, 1)
        record = store.get_message("tick")
        assert record is not None and record.recurrence is None

    def test_bulk_reschedule_moves_waiting_rows_once(self, harness: Harness) -> None:
        store = harness.store
        base = self._fill(harness)
        park(harness, "parked-1")
        where = MessageFilter(tenant="acme")
        first = store.bulk_reschedule(where, park_attempts=2, shift_ms=3_600_000, batch=1)
        assert first.done == 1 and first.after is not None
        second = store.bulk_reschedule(
            where, park_attempts=2, shift_ms=3_600_000, batch=1, after=first.after, since=first.now
        )
        assert second.done == 1
        third = store.bulk_reschedule(
            where,
            park_attempts=2,
            shift_ms=3_600_000,
            batch=1,
            after=second.after,
            since=first.now,
        )
        assert (third.done, third.after) == (0, None)  # the moved rows are not met again
        moved = [store.get_message(i) for i in ("acme-1", "acme-2")]
        assert [m.deadline for m in moved if m] == [
            base + timedelta(hours=1),
            base + timedelta(hours=1, seconds=1),
        ]
        target = base + timedelta(days=1)
        done = store.bulk_reschedule(MessageFilter(), park_attempts=2, deadline=target)
        assert done.done == 6  # every waiting row; the parked one is left alone
        parked = store.get_message("parked-1")
        assert parked is not None and parked.deadline < target

    def test_bulk_fire_now_makes_rows_due(self, harness: Harness) -> None:
        store = harness.store
        self._fill(harness)
        fired = store.bulk_reschedule(MessageFilter(tenant="beta"), park_attempts=2, fire_now=True)
        assert fired.done == 2
        harness.advance(10)
        claimed = store.claim(node(), HORIZON, 10, 2)
        assert sorted(r.id for r in claimed) == ["beta-1", "beta-2"]
        again = store.bulk_reschedule(MessageFilter(tenant="beta"), park_attempts=2, fire_now=True)
        assert again.done == 0
