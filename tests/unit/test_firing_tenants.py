"""The claim-ahead budget is shared between tenants (issue 13): a flood cannot fill
``max_in_flight`` so that a small tenant's due message waits for the flood to drain."""

from __future__ import annotations

from datetime import timedelta

from chronos.firing import TENANT_SHARE_OF_IN_FLIGHT
from chronos.protocol import ScheduledMessage
from tests.unit.helpers import OUTPUT, Firing


def _msg(message_id: str, firing: Firing, due_ms: float, tenant: str) -> ScheduledMessage:
    deadline = firing.clock.now() + timedelta(milliseconds=due_ms)
    return ScheduledMessage(message_id, deadline, tenant.encode(), b"v", [], tenant=tenant)


def test_a_flood_holding_the_budget_leaves_room_for_a_small_tenant() -> None:
    firing = Firing.create(auto=False, max_in_flight=100, claim_batch_size=20)
    flood = [_msg(f"f{i:03d}", firing, 100, "flood") for i in range(300)]
    # due beyond the lookahead: claimed only once the flood already holds what it may
    firing.store.enqueue([*flood, _msg("small", firing, 1500, "small")], 0)
    firing.run_for(1600, step_ms=5)  # no delivery report arrives: the flood's rows stay held
    keys = [r.key for r in firing.publisher.records if r.topic == OUTPUT]
    assert b"small" in keys  # fired at its deadline although the flood is waiting
    # the flood holds at most its share of the budget, plus one claim's worth
    assert keys.count(b"flood") <= int(100 * TENANT_SHARE_OF_IN_FLIGHT) + 20


def test_the_flood_is_claimed_again_when_it_holds_less_than_its_share() -> None:
    firing = Firing.create(auto=False, max_in_flight=100, claim_batch_size=20)
    firing.store.enqueue([_msg(f"f{i:03d}", firing, 100, "flood") for i in range(300)], 0)
    firing.run_for(200, step_ms=5)
    before = len(firing.publisher.records)
    firing.publisher.deliver()
    firing.run_for(1000, step_ms=5)
    assert len(firing.publisher.records) > before
