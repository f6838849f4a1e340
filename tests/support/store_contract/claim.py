"""The store contract of the claim: due rows oldest first, within the limits, never shared; rows
that failed too often are parked."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from chronos.store import row_bytes
from tests.support.store_contract.common import (
    HORIZON,
    Harness,
    claim_concurrently,
    claims,
    msg,
    node,
    park,
)


class ClaimContract:
    """Subclasses provide a ``harness`` fixture."""

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

    @pytest.mark.parametrize("fair", [False, True], ids=["oldest-first", "fair"])
    def test_claim_counts_headers_in_its_byte_budget_as_the_firing_loop_does(
        self, harness: Harness, fair: bool
    ) -> None:
        """The budget counts each row as ``row_bytes`` does (key, value, each header's name and
        value: what the firing loop holds), whatever form the store keeps headers in: the same
        rows on every store, to the byte, in the plain and the fair claim (a tenant's rows)."""
        store = harness.store
        now = harness.now()
        headers: list[tuple[str, bytes | None]] = [
            ("trace", b"t" * 40),
            ("trace", b"\x00\xff" * 7),  # repeated, not text
            ("empty", b""),
            ("absent", None),
            ("naïve", b"e" * 5),  # not ASCII
        ]
        rows = [
            msg(f"h{i}", now + timedelta(milliseconds=100 + i), key=b"k" * i, value=b"v" * 30)
            for i in range(5)
        ]
        rows = [replace(m, headers=headers, tenant="acme") for m in rows]
        store.enqueue(rows, 0)
        sizes = [row_bytes(m.key, m.value, m.headers) for m in rows]
        me = node()

        def claim(max_bytes: int) -> list[str]:
            return [r.id for r in store.claim(me, HORIZON, 10, 5, max_bytes=max_bytes, fair=fair)]

        assert claim(sum(sizes[:3]) - 1) == ["h0", "h1"]  # one byte short of the third
        assert claim(sizes[2]) == ["h2"]
        assert claim(sum(sizes[3:])) == ["h3", "h4"]  # the budget is inclusive

    def test_claim_horizon_is_inclusive_to_the_microsecond(self, harness: Harness) -> None:
        store, me = harness.store, node()
        with harness.frozen() as now:
            edge = now + timedelta(milliseconds=HORIZON)
            store.enqueue(
                [
                    msg("edge", edge),
                    msg("beyond", edge + timedelta(microseconds=1)),
                    msg("ms-beyond", edge + timedelta(milliseconds=1)),
                ],
                0,
            )
            assert [r.id for r in store.claim(me, HORIZON, 10, 5)] == ["edge"]
        harness.advance(1)
        assert [r.id for r in store.claim(me, HORIZON, 10, 5)] == ["beyond", "ms-beyond"]

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
        taken, errors = claim_concurrently(store)
        assert not errors
        assert sorted(taken) == ids  # each row exactly once

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

    def test_a_parked_row_stays_parked_when_the_threshold_rises(self, harness: Harness) -> None:
        """release stamps parked_at at the threshold: out of the claim until requeued, whatever
        park_attempts later claims pass (the claim walks the index of unparked rows)."""
        store = harness.store
        park(harness, "p")
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
