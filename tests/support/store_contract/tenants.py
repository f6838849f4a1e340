"""The store contract of tenants: the tenant is stored with the message; the plain claim
stays oldest first; the fair claim (``fair=True``, which the firing loop asks for while its
previous claim came back full) shares its batch between the tenants with due rows, visiting the
known tenants in turn. Run like ``StoreContract`` against the in-memory store and
the real Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta

from chronos.protocol import Action, ScheduledMessage
from tests.support.store_contract.common import HORIZON, Harness, claim_concurrently, node


def tmsg(
    message_id: str,
    deadline: datetime,
    tenant: str = "",
    action: Action = Action.SCHEDULE,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, b"k", b"v", [], action, None, tenant)


def flood_and_small(harness: Harness, flood: int = 60, small: int = 2) -> None:
    """``flood`` rows of tenant "flood" due first, then ``small`` rows of tenant "small"; all
    due once the call returns."""
    now = harness.now()
    rows = [tmsg(f"f{i:03d}", now + timedelta(milliseconds=200), "flood") for i in range(flood)]
    rows += [tmsg(f"s{i}", now + timedelta(milliseconds=400), "small") for i in range(small)]
    harness.store.enqueue(rows, 0)
    harness.advance(500)


class TenantContract:
    def test_the_tenant_is_stored_and_claimed_with_the_message(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        soon = now + timedelta(milliseconds=300)
        store.enqueue([tmsg("a", soon, "acme"), tmsg("b", soon)], 0)
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert rows["a"].tenant == "acme"
        assert rows["b"].tenant == ""

    def test_several_tenants_are_known_once_a_second_tenant_is_written(
        self, harness: Harness
    ) -> None:
        store, later = harness.store, harness.now() + timedelta(hours=1)
        store.enqueue([tmsg("d1", later), tmsg("d2", later)], 0)
        assert not store.several_tenants()  # the default tenant alone
        store.enqueue([tmsg("c1", later, "acme", Action.CANCEL)], 0)
        assert not store.several_tenants()  # a cancel names no tenant to serve
        store.enqueue([tmsg("a1", later, "acme")], 0)
        assert store.several_tenants()

    def test_tenants_with_nothing_waiting_are_pruned_but_never_the_default(
        self, harness: Harness
    ) -> None:
        store, now = harness.store, harness.now()
        later = now + timedelta(hours=1)
        store.enqueue([tmsg(f"g{i}", later, f"gone{i}") for i in range(3)], 0)
        store.enqueue([tmsg("k1", later, "kept"), tmsg("d1", later)], 0)
        for i in range(3):
            store.enqueue([tmsg(f"g{i}", later, action=Action.CANCEL)], 0)
        assert store.prune_tenants(2) == 2  # bounded per call
        assert store.prune_tenants(100) == 1
        assert store.prune_tenants(100) == 0
        assert store.several_tenants()  # "kept" (and the default tenant) are still known
        store.enqueue([tmsg("k1", later, action=Action.CANCEL)], 0)
        assert store.prune_tenants(100) == 1
        assert not store.several_tenants()  # only the default tenant, which is never pruned
        store.enqueue([tmsg("back", later, "gone0")], 0)  # a pruned tenant comes back
        assert store.several_tenants()

    def test_a_reschedule_moves_the_message_to_its_new_tenant(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        later = now + timedelta(hours=1)
        store.enqueue([tmsg("a", later, "acme")], 0)
        store.enqueue([tmsg("a", now + timedelta(milliseconds=300), "beta", Action.RESCHEDULE)], 0)
        (row,) = store.claim(node(), HORIZON, 10, 5, fair=True)
        assert row.tenant == "beta"

    # -------------------------------------------------------------- fair claiming

    def test_the_plain_claim_stays_oldest_first_whatever_the_tenants(
        self, harness: Harness
    ) -> None:
        flood_and_small(harness)
        first = harness.store.claim(node(), HORIZON, 10, 5)
        assert len(first) == 10
        assert {r.tenant for r in first} == {"flood"}  # the flood is due first

    def test_a_small_tenant_is_in_the_first_fair_claim_while_a_flood_waits(
        self, harness: Harness
    ) -> None:
        flood_and_small(harness)  # 62 rows due, a claim takes 10
        first = harness.store.claim(node(), HORIZON, 10, 5, fair=True)
        assert len(first) == 10  # work conserving: the rest of the batch is the flood's
        assert {"s0", "s1"} <= {r.id for r in first}
        assert [r.tenant for r in first].count("flood") == 8
        assert [r.deadline for r in first] == sorted(r.deadline for r in first)

    def test_the_batch_is_shared_between_the_tenants_with_due_rows(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        rows = [
            tmsg(f"{t}{i:02d}", now + timedelta(milliseconds=100 + 25 * n + i), t)
            for n, t in enumerate("abc")
            for i in range(20)
        ]
        store.enqueue(rows, 0)
        harness.advance(400)
        claimed = store.claim(node(), HORIZON, 9, 5, fair=True)
        by_tenant = sorted(r.tenant for r in claimed)
        assert by_tenant == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
        assert {r.id for r in claimed} == {f"{t}{i:02d}" for t in "abc" for i in range(3)}

    def test_without_overload_the_fair_claim_takes_what_is_due_oldest_first(
        self, harness: Harness
    ) -> None:
        store, now = harness.store, harness.now()
        store.enqueue(
            [
                tmsg("b2", now + timedelta(milliseconds=300), "b"),
                tmsg("a1", now + timedelta(milliseconds=200), "a"),
                tmsg("a3", now + timedelta(milliseconds=400), "a"),
                tmsg("later", now + timedelta(hours=1), "c"),
            ],
            0,
        )
        assert [r.id for r in store.claim(node(), HORIZON, 10, 5, fair=True)] == ["a1", "b2", "a3"]

    def test_more_tenants_than_a_claim_visits_are_all_visited_in_turn(
        self, harness: Harness
    ) -> None:
        """A claim of 4 rows visits at most 4 known tenants ('' and "flood" among them): the
        next fair claims carry on after the last one visited, wrapping round."""
        store, now = harness.store, harness.now()
        small = [tmsg(f"t{i}", now + timedelta(milliseconds=300), f"t{i}") for i in range(10)]
        flood = [tmsg(f"f{i:03d}", now + timedelta(milliseconds=100), "flood") for i in range(50)]
        store.enqueue(flood + small, 0)
        harness.advance(400)
        claimed: list[str] = []
        for _ in range(3):  # 12 known tenants, 4 a claim
            rows = store.claim(node(), HORIZON, 4, 5, fair=True)
            assert len(rows) == 4
            claimed += [r.id for r in rows]
        assert {f"t{i}" for i in range(10)} <= set(claimed)

    def test_excluded_tenants_are_not_claimed(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        flood = [tmsg(f"f{i:02d}", now + timedelta(milliseconds=200), "flood") for i in range(20)]
        store.enqueue([*flood, tmsg("s", now + timedelta(milliseconds=600), "small")], 0)
        claimed = store.claim(node(), HORIZON, 10, 5, exclude_tenants=["flood"])
        assert [r.id for r in claimed] == ["s"]
        assert len(store.claim(node(), HORIZON, 10, 5)) == 10  # the flood waits, unclaimed

    def test_concurrent_fair_claims_never_share_a_row(self, harness: Harness) -> None:
        store = harness.store
        soon = harness.now() + timedelta(milliseconds=500)
        ids = [f"m{i:03d}" for i in range(300)]
        store.enqueue(
            [tmsg(i, soon, "flood" if n % 3 else f"t{n % 7}") for n, i in enumerate(ids)], 0
        )
        taken, errors = claim_concurrently(store, fair=True)
        assert not errors
        assert sorted(taken) == ids  # each row exactly once
