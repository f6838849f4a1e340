"""The store contract of tenants (issue 13): the tenant is stored with the message, and a claim
under overload shares its batch between the tenants with due rows. Run like
``store_contract.StoreContract`` against the in-memory store and the real Postgres."""

from __future__ import annotations

from datetime import datetime, timedelta

from chronos.protocol import Action, ScheduledMessage
from tests.unit.store_contract import HORIZON, Harness, node


def tmsg(
    message_id: str,
    deadline: datetime,
    tenant: str = "",
    action: Action = Action.SCHEDULE,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, b"k", b"v", [], action, None, tenant)


class TenantContract:
    def test_the_tenant_is_stored_and_claimed_with_the_message(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        soon = now + timedelta(milliseconds=300)
        store.enqueue([tmsg("a", soon, "acme"), tmsg("b", soon)], 0)
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert rows["a"].tenant == "acme"
        assert rows["b"].tenant == ""

    def test_a_reschedule_moves_the_message_to_its_new_tenant(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        later = now + timedelta(hours=1)
        store.enqueue([tmsg("a", later, "acme")], 0)
        store.enqueue([tmsg("a", now + timedelta(milliseconds=300), "beta", Action.RESCHEDULE)], 0)
        (row,) = store.claim(node(), HORIZON, 10, 5)
        assert row.tenant == "beta"

    # -------------------------------------------------------------- fair claiming

    def test_a_small_tenant_is_in_the_first_claim_while_a_flood_waits(
        self, harness: Harness
    ) -> None:
        store, now = harness.store, harness.now()
        flood = [tmsg(f"f{i:03d}", now + timedelta(milliseconds=200), "flood") for i in range(60)]
        small = [tmsg(f"s{i}", now + timedelta(milliseconds=400), "small") for i in range(2)]
        store.enqueue(flood + small, 0)
        harness.advance(500)  # everything is due: 62 rows, a claim takes 10
        first = store.claim(node(), HORIZON, 10, 5)
        assert len(first) == 10
        assert {"s0", "s1"} <= {r.id for r in first}
        # the rest of the batch is the flood's, oldest first
        assert sorted(r.id for r in first if r.tenant == "flood") == [f"f{i:03d}" for i in range(8)]

    def test_the_batch_is_shared_between_the_tenants_with_due_rows(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        rows = [
            tmsg(f"{t}{i:02d}", now + timedelta(milliseconds=100 + 25 * n + i), t)
            for n, t in enumerate("abc")
            for i in range(20)
        ]
        store.enqueue(rows, 0)
        harness.advance(400)
        claimed = store.claim(node(), HORIZON, 9, 5)
        by_tenant = sorted(r.tenant for r in claimed)
        assert by_tenant == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
        assert {r.id for r in claimed} == {f"{t}{i:02d}" for t in "abc" for i in range(3)}

    def test_without_overload_the_claim_is_oldest_first(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        store.enqueue(
            [
                tmsg("b2", now + timedelta(milliseconds=300), "b"),
                tmsg("a1", now + timedelta(milliseconds=200), "a"),
                tmsg("a3", now + timedelta(milliseconds=400), "a"),
            ],
            0,
        )
        assert [r.id for r in store.claim(node(), HORIZON, 2, 5)] == ["a1", "b2"]
        assert [r.id for r in store.claim(node(), HORIZON, 2, 5)] == ["a3"]

    def test_excluded_tenants_are_not_claimed(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        flood = [tmsg(f"f{i:02d}", now + timedelta(milliseconds=200), "flood") for i in range(20)]
        store.enqueue([*flood, tmsg("s", now + timedelta(milliseconds=600), "small")], 0)
        claimed = store.claim(node(), HORIZON, 10, 5, exclude_tenants=["flood"])
        assert [r.id for r in claimed] == ["s"]
        assert len(store.claim(node(), HORIZON, 10, 5)) == 10  # the flood waits, unclaimed
