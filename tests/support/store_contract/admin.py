"""The store contract of the admin operations: requeue, reschedule, cancel, list, ping."""

from __future__ import annotations

from datetime import timedelta
from itertools import accumulate

import pytest

from chronos.store import CancelOutcome, MessageFilter, RequeueOutcome, RescheduleOutcome
from chronos.store.filters import listed_bytes
from tests.support.store_contract.common import (
    FAR,
    HORIZON,
    Harness,
    claim_one,
    claims,
    msg,
    node,
    park,
)


class AdminContract:
    """Subclasses provide a ``harness`` fixture."""

    # -------------------------------------------------------------------- requeue, reschedule

    def test_requeue_gives_a_parked_message_a_fresh_start(self, harness: Harness) -> None:
        store = harness.store
        park(harness, "p")
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
        park(harness, "p")
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
        claim_one(harness, "c")
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

    # -------------------------------------------------------------------- cancel, list, ping

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

    @pytest.mark.parametrize("state", [None, "waiting"])
    def test_a_listed_page_is_bounded_by_bytes_too(
        self, harness: Harness, state: str | None
    ) -> None:
        """Rows of 100 KB headers: a 250 KB budget takes rows while the running sum stays under
        it, plus the one that crosses it (the caller's sign that there is more)."""
        store = harness.store
        base = harness.now() + timedelta(minutes=5)
        big: list[tuple[str, bytes | None]] = [
            ("h", bytes(range(256)) * 400)
        ]  # 102,400 bytes (compressible: measured unpacked)
        store.enqueue(
            [msg(f"b{i}", base + timedelta(seconds=i), headers=big) for i in range(10)], 0
        )
        rows = store.list_messages(state=state, park_attempts=5, limit=10, max_bytes=250_000)
        assert 1 < len(rows) < 10, [r.page_bytes for r in rows]
        assert [r.page_bytes for r in rows] == sorted(r.page_bytes for r in rows)
        assert rows[-2].page_bytes < 250_000 <= rows[-1].page_bytes
        one = store.list_messages(state=state, park_attempts=5, limit=10, max_bytes=1)
        assert [r.id for r in one] == ["b0"]  # one row at least, whatever its size
        unbounded = store.list_messages(state=state, park_attempts=5, limit=10)
        assert len(unbounded) == 10

    @pytest.mark.parametrize("find", [False, True], ids=["list", "find"])
    def test_a_page_counts_keys_and_headers_as_listed_bytes(
        self, harness: Harness, find: bool
    ) -> None:
        """A page's byte budget counts each row as ``listed_bytes`` (key, headers as the stored
        JSON's text): the same rows and ``page_bytes`` on every store, to the byte, whatever the
        headers hold (repeats, non-ASCII names, characters JSON escapes, NULL values)."""
        store = harness.store
        base = harness.now() + timedelta(minutes=5)
        headers: list[tuple[str, bytes | None]] = [
            ("trace", b"t" * 40),
            ("trace", b"\x00\xff" * 7),
            ("naïve", b""),
            ('quote"back\\slash\ttab', b"q"),
            ("absent", None),
        ]
        rows = [
            msg(f"l{i}", base + timedelta(seconds=i), key=b"k" * i, headers=headers)
            for i in range(4)
        ]
        store.enqueue(rows, 0)
        running = list(accumulate(listed_bytes(m.key, m.headers) for m in rows))

        def page(max_bytes: int) -> list[tuple[str, int]]:
            if find:
                found = store.find_messages(
                    MessageFilter(), park_attempts=5, limit=10, max_bytes=max_bytes
                )
            else:
                found = store.list_messages(
                    state="waiting", park_attempts=5, limit=10, max_bytes=max_bytes
                )
            return [(r.id, r.page_bytes) for r in found]

        # Rows while the sum before them stays under the budget: the one that reaches it is the
        # last (the caller's sign that there is more).
        assert page(running[1]) == [("l0", running[0]), ("l1", running[1])]
        assert page(running[1] + 1) == list(zip(["l0", "l1", "l2"], running, strict=False))

    @pytest.mark.parametrize("state", [None, "waiting", "parked", "claimed"])
    def test_every_listed_state_runs_with_a_byte_budget(
        self, harness: Harness, state: str | None
    ) -> None:
        store = harness.store
        park(harness, "p")
        store.enqueue([msg("w", harness.now() + timedelta(minutes=5))], 0)
        store.enqueue([msg("c", harness.now() + timedelta(milliseconds=100))], 0)
        harness.advance(200)
        store.claim(node(), HORIZON, 10, 2)
        rows = store.list_messages(state=state, park_attempts=2, limit=10, max_bytes=1_000_000)
        expected = {None: {"p", "w", "c"}, "waiting": {"w"}, "parked": {"p"}, "claimed": {"c"}}
        assert {r.id for r in rows} == expected[state]

    def test_ping_returns_the_store_clock(self, harness: Harness) -> None:
        before = harness.now()
        assert harness.store.ping() >= before
