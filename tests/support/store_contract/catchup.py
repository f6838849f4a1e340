"""The store contract of the paced catch-up: a claim with a ``Catchup`` takes at most its limit
of the rows overdue by more than its threshold (oldest first), and the rows coming due now up to
the claim's limit as before. Part of ``StoreContract``."""

from __future__ import annotations

from datetime import timedelta

from chronos.store import Catchup
from tests.support.store_contract.common import HORIZON, Harness, msg, node


class CatchupContract:
    def test_the_overdue_rows_are_claimed_apart_within_their_limit(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg(f"old{i}", now + timedelta(milliseconds=200 + i)) for i in range(5)], 0)
        harness.advance(5_000)  # the old rows are 4.8 s overdue
        soon = harness.now() + timedelta(milliseconds=300)
        store.enqueue([msg(f"new{i}", soon) for i in range(3)], 0)
        rows = store.claim(node(), HORIZON, 10, 5, catchup=Catchup(after_ms=2_000, limit=2))
        assert [r.id for r in rows] == ["old0", "old1", "new0", "new1", "new2"]
        rows = store.claim(node(), HORIZON, 2, 5, catchup=Catchup(after_ms=2_000, limit=0))
        assert rows == []  # no tokens: the overdue rows wait; the on-time ones are taken
        rows = store.claim(node(), HORIZON, 10, 5)
        assert [r.id for r in rows] == ["old2", "old3", "old4"]  # without catch-up: all

    def test_the_on_time_rows_keep_the_whole_batch(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue([msg(f"old{i}", now + timedelta(milliseconds=200 + i)) for i in range(5)], 0)
        harness.advance(5_000)
        soon = harness.now() + timedelta(milliseconds=300)
        store.enqueue([msg(f"new{i}", soon + timedelta(milliseconds=i)) for i in range(4)], 0)
        rows = store.claim(node(), HORIZON, 3, 5, catchup=Catchup(after_ms=2_000, limit=1))
        assert [r.id for r in rows] == ["old0", "new0", "new1", "new2"]
