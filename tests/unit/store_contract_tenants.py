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
