"""The claim-ahead budget is shared between tenants: a flood cannot fill
``max_in_flight`` so that a small tenant's due message waits for the flood to drain."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from unittest.mock import patch

from chronos.firing.tenant_share import TENANT_SHARE_OF_IN_FLIGHT
from chronos.protocol import ScheduledMessage
from chronos.store import ClaimedRow
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


def test_a_flood_whose_rows_fired_is_claimed_on_while_it_holds_less_than_its_share() -> None:
    """Rows handed to the producer queue nobody's timers: a flood draining overdue rows is
    claimed on past its queue's cap (four claims' worth), up to its share of the budget, as a
    single tenant would be; only its share stays free for the others."""
    firing = Firing.create(auto=False, max_in_flight=1000, claim_batch_size=20)
    firing.store.enqueue([_msg(f"f{i:03d}", firing, 50, "flood") for i in range(300)], 0)
    firing.store.enqueue([_msg("other", firing, 60_000, "other")], 0)  # known, not due
    firing.run_for(400, step_ms=5)  # no delivery report arrives: every fired row stays held
    assert len([r for r in firing.publisher.records if r.topic == OUTPUT]) == 300


def test_a_flood_due_later_queues_at_most_four_claims_of_timers() -> None:
    """Claimed ahead of its deadline, a flood's rows wait in the node's timers, every one of
    them due before a small tenant's message claimed after them: at most four claims' worth."""
    firing = Firing.create(max_in_flight=1000, claim_batch_size=20, lookahead_ms=1000)
    firing.store.enqueue([_msg(f"f{i:03d}", firing, 900, "flood") for i in range(300)], 0)
    firing.store.enqueue([_msg("other", firing, 60_000, "other")], 0)  # known, not due
    firing.run_for(500, step_ms=5)
    unfired = firing.loop.dispatcher.unfired_by_tenant()
    assert 4 * 20 <= unfired["flood"] <= 5 * 20  # the cap, and the claim that reached it
    firing.run_for(1000, step_ms=5)
    assert len([r for r in firing.publisher.records if r.topic == OUTPUT]) == 300
    assert firing.loop.dispatcher.unfired_by_tenant() == {}


def test_the_flood_is_claimed_again_when_it_holds_less_than_its_share() -> None:
    firing = Firing.create(auto=False, max_in_flight=100, claim_batch_size=20)
    firing.store.enqueue([_msg(f"f{i:03d}", firing, 100, "flood") for i in range(300)], 0)
    firing.run_for(200, step_ms=5)
    before = len(firing.publisher.records)
    firing.publisher.deliver()
    firing.run_for(1000, step_ms=5)
    assert len(firing.publisher.records) > before


def test_a_small_tenant_is_claimed_in_the_first_claim_after_its_deadline_while_a_flood_waits() -> (
    None
):
    """The flood's claims come back full, so the next claim is fair: the small tenant's message
    is in the first claim that may take it (its deadline within the claim's horizon), while
    thousands of the flood's rows, due before it, still wait in the table."""
    firing = Firing.create(claim_batch_size=10, lookahead_ms=0)  # horizon: the 50 ms advance
    flood = [_msg(f"f{i:04d}", firing, 50, "flood") for i in range(5000)]
    small = _msg("small", firing, 300, "small")
    firing.store.enqueue([*flood, small], 0)
    horizon = timedelta(milliseconds=firing.settings.timing_advance_ms)
    claims: list[tuple[datetime, list[ClaimedRow], int]] = []  # at, rows, rows left waiting
    claim = firing.store.claim

    def recording(*args: Any, **kwargs: Any) -> list[ClaimedRow]:
        rows = claim(*args, **kwargs)
        waiting = len(firing.store) - len(firing.store.claimed())
        claims.append((firing.clock.now(), rows, waiting))
        return rows

    with patch.object(firing.store, "claim", side_effect=recording):
        firing.run_for(400, step_ms=1)
    first, waiting = next((rows, n) for at, rows, n in claims if at + horizon >= small.deadline)
    assert "small" in [r.id for r in first]
    assert len(first) == 10  # the rest of the batch is the flood's: it drains at full speed
    assert waiting > 2000  # the flood's rows, due before it, still wait in the table
    assert b"small" in [r.key for r in firing.publisher.records if r.topic == OUTPUT]


def test_a_claim_is_fair_only_after_a_full_claim() -> None:
    """Without overload the claim is the plain oldest-first statement (no added cost)."""
    firing = Firing.create(claim_batch_size=10, lookahead_ms=0)
    firing.store.enqueue([_msg(f"a{i}", firing, 100, "a") for i in range(5)], 0)
    firing.run_for(300, step_ms=5)
    assert firing.store.fair_claims == 0
    firing.store.enqueue([_msg(f"b{i:02d}", firing, 100, "b") for i in range(25)], 0)
    firing.run_for(300, step_ms=5)
    assert firing.store.fair_claims >= 1  # the claim after the first full one
    assert len([r for r in firing.publisher.records if r.topic == OUTPUT]) == 30


def test_a_single_tenant_claims_ahead_as_far_as_the_budget_allows() -> None:
    """With only the default tenant known, nobody needs a share of the budget: the node holds
    up to ``max_in_flight`` as before tenants (the per-tenant cap would be a pure loss)."""
    firing = Firing.create(auto=False, max_in_flight=100, claim_batch_size=20)
    firing.store.enqueue([_msg(f"d{i:03d}", firing, 100, "") for i in range(300)], 0)
    firing.run_for(300, step_ms=5)  # no delivery report arrives: every claimed row stays held
    assert not firing.store.several_tenants()
    assert len(firing.publisher.records) == 100  # the whole budget, not the tenant's share


def test_the_budget_is_shared_once_a_second_tenant_is_known() -> None:
    firing = Firing.create(auto=False, max_in_flight=100, claim_batch_size=20)
    firing.store.enqueue([_msg(f"d{i:03d}", firing, 100, "") for i in range(300)], 0)
    firing.store.enqueue([_msg("other", firing, 60_000, "other")], 0)  # known, not due
    firing.run_for(300, step_ms=5)
    assert firing.store.several_tenants()
    assert len(firing.publisher.records) <= int(100 * TENANT_SHARE_OF_IN_FLIGHT) + 20
