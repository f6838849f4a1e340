"""The firing loop's byte budget: large values never make a node hold more than it allows."""

from __future__ import annotations

from chronos.store import Outcome, row_bytes
from chronos.testing import InMemoryStore
from tests.support.store_contract import msg
from tests.unit.helpers import Firing

VALUE = 100_000  # bytes per message
BUDGET = 450_000  # four messages fit, a fifth does not


def held_bytes(store: InMemoryStore) -> int:
    return sum(row_bytes(r.key, r.value, r.headers) for r in store.claimed())


def test_large_values_never_make_the_node_hold_more_than_its_byte_budget() -> None:
    f = Firing.create(auto=False, max_in_flight_bytes=BUDGET, lookahead_ms=1000)
    deadline = f.at(200)
    batch = [
        msg(f"m{i}", deadline, key=None, value=b"%06d" % i + b"x" * (VALUE - 6)) for i in range(40)
    ]
    assert f.store.enqueue(batch, 0) == [Outcome.INSERTED] * 40
    peak = 0
    for _ in range(100):  # deliveries held back: the budget alone limits what is claimed
        f.tick(10)
        peak = max(peak, held_bytes(f.store))
    assert 0 < peak <= BUDGET
    for _ in range(400):  # reports come back: room frees up and everything fires, once
        f.publisher.deliver()
        f.tick(10)
        peak = max(peak, held_bytes(f.store))
    assert peak <= BUDGET
    assert len(f.store) == 0
    fired = sorted((r.value or b"")[:6] for r in f.publisher.delivered())
    assert fired == [b"%06d" % i for i in range(40)]  # each once
    assert f.loop.held_bytes == 0


def test_a_message_larger_than_the_budget_still_fires() -> None:
    f = Firing.create(max_in_flight_bytes=1000)
    assert f.store.enqueue([msg("huge", f.at(50), value=b"x" * 5000)], 0) == [Outcome.INSERTED]
    f.run_for(200, step_ms=5)
    assert [len(r.value or b"") for r in f.publisher.delivered()] == [5000]
    assert f.loop.held_bytes == 0
