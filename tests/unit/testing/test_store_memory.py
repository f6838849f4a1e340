"""The Store contract against the in-memory store of ``chronos.testing`` (a manual clock: the
``harness`` of conftest.py), plus what only a controllable clock can show: the exact boundaries
of every time comparison."""

from __future__ import annotations

import inspect
import uuid
from datetime import timedelta

import pytest

from chronos.errors import StoreError
from chronos.kafka import Publisher
from chronos.store import Store
from chronos.testing import FakePublisher, InMemoryStore, ManualClock
from tests.support.store_contract import (
    HORIZON,
    ActionContract,
    StoreContract,
    TenantContract,
    claims,
    msg,
    node,
)
from tests.support.store_contract.history import HistoryContract


class TestInMemoryStore(StoreContract, ActionContract, TenantContract):
    pass


class TestInMemoryHistory(HistoryContract):
    pass


# ------------------------------------------------------------------------ the fakes fit


def _public_methods(protocol: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(protocol).items()
        if callable(member) and (not name.startswith("_") or name == "__len__")
    }


@pytest.mark.parametrize(("fake", "protocol"), [(InMemoryStore, Store), (FakePublisher, Publisher)])
def test_the_fakes_implement_every_method_of_their_interface(fake: type, protocol: type) -> None:
    for name, expected in _public_methods(protocol).items():
        assert hasattr(fake, name), f"{fake.__name__} lacks {name}"
        actual = inspect.signature(getattr(fake, name))
        assert list(actual.parameters) == list(expected.parameters), name
        for param in expected.parameters.values():
            assert actual.parameters[param.name].kind == param.kind, (name, param.name)


# ------------------------------------------------------------------------ exact boundaries


# The due, horizon and hold-time boundaries at the microsecond are contract tests (on Postgres
# too, in one transaction); a hold time other than 0 only a manual clock can reach exactly.


def test_hold_time_boundary_is_strict() -> None:
    """A claim exactly hold_ms old is still the owner's; one microsecond more and it is stuck."""
    clock = ManualClock()
    store = InMemoryStore(clock)
    store.enqueue([msg("h", clock.now() + timedelta(milliseconds=100))], 0)
    store.claim(node(), HORIZON, 1, 5)
    clock.advance(5_000)
    assert store.find_stuck(5_000, 10) == []
    clock.advance(0.001)
    assert [s.id for s in store.find_stuck(5_000, 10)] == ["h"]


def test_claim_stamps_the_arrival_on_the_monotonic_clock() -> None:
    clock = ManualClock()
    store = InMemoryStore(clock)
    store.enqueue([msg("m", clock.now() + timedelta(milliseconds=700))], 0)
    (row,) = store.claim(node(), HORIZON, 1, 5)
    assert row.claimed_monotonic == clock.monotonic()
    assert row.remaining_ms == pytest.approx(700)


# ------------------------------------------------------------------------ the fake itself


def test_injected_failures_are_store_errors_for_the_named_statement() -> None:
    store = InMemoryStore(ManualClock())
    store.fail_next(1, "claim_due")
    store.ping()  # other statements are unaffected
    with pytest.raises(StoreError) as raised:
        store.claim(node(), HORIZON, 1, 5)
    assert raised.value.retryable  # an outage: the same statement works later
    assert store.claim(node(), HORIZON, 1, 5) == []


def test_invalid_node_ids_fail_like_the_uuid_cast() -> None:
    store = InMemoryStore(ManualClock())
    with pytest.raises(StoreError):
        store.claim("not-a-uuid", HORIZON, 1, 5)


def test_a_batch_with_a_repeated_id_is_refused() -> None:
    clock = ManualClock()
    store = InMemoryStore(clock)
    later = clock.now() + timedelta(minutes=1)
    with pytest.raises(ValueError):
        store.enqueue([msg("d", later), msg("d", later)], 0)


def test_a_closed_store_refuses_statements() -> None:
    store = InMemoryStore(ManualClock())
    store.close()
    with pytest.raises(StoreError):
        store.ping()


def test_snapshots_do_not_alias_the_rows() -> None:
    clock = ManualClock()
    store = InMemoryStore(clock)
    store.enqueue([msg("s", clock.now() + timedelta(milliseconds=10))], 0)
    snapshot = store.rows()["s"]
    me = str(uuid.uuid4())
    rows = store.claim(me, HORIZON, 1, 5)
    assert snapshot.readied_by is None
    assert store.claimed()[0].readied_by == me
    assert store.delete_fired(me, claims(rows)) == {"s"}
    assert len(store) == 0
