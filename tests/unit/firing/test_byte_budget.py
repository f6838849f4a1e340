"""The firing loop's byte budget: large values never make a node hold more than it allows."""

from __future__ import annotations

from chronos.protocol import Headers
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


def test_a_record_in_the_producers_hands_is_not_held_a_second_time_by_its_timer() -> None:
    f = Firing.create(auto=False, lookahead_ms=100)
    value = b"v" * 10_000
    headers: Headers = [("trace", b"t1")]
    assert f.store.enqueue([msg("m", f.at(50), key=b"k", value=value, headers=headers)], 0) == [
        Outcome.INSERTED
    ]
    f.run_for(80, step_ms=5)
    [record] = f.publisher.pending()
    assert (record.key, record.value, record.headers) == (b"k", value, headers)
    # The report's callback keeps the timer until the delivery is known: it keeps no copy of the
    # record, whose bytes still count against the budget until then.
    timer = record.on_delivery.args[0]  # type: ignore[union-attr]
    assert (timer.row.id, timer.row.key, timer.row.value, timer.row.headers) == (
        "m",
        None,
        None,
        [],
    )
    assert f.loop.held_bytes == row_bytes(b"k", value, headers)
    f.publisher.fail()  # given back: claimed again from the table, whole
    for _ in range(200):  # the claim backs off after a failed write
        f.tick(50)
        if f.publisher.deliver():
            break
    f.run_for(20, step_ms=5)
    [fired] = f.publisher.delivered()
    assert (fired.key, fired.value, fired.headers) == (b"k", value, headers)
    assert len(f.store) == 0 and f.loop.held_bytes == 0
