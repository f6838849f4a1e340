"""A node cut off from Kafka alone gives its claims back; a stall of every node's writes (a
broker's death, until it is fenced) is waited out (chronos.firing.cutoff)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest

from chronos.firing.cutoff import CUT_OFF_AFTER_S
from chronos.firing.loop import WRITE_PROBE_ROWS
from chronos.observability.dependencies import KAFKA_WRITES
from chronos.store import Outcome
from tests.support.store_contract import msg
from tests.unit.helpers import Firing

PEER = str(uuid.UUID(int=1))


@pytest.fixture(autouse=True)
def writes_up() -> Iterator[None]:
    KAFKA_WRITES.reset()
    yield
    KAFKA_WRITES.reset()


def _schedule(f: Firing, message_id: str, in_ms: float) -> datetime:
    deadline = f.at(in_ms)
    assert f.store.enqueue([msg(message_id, deadline)], 0) == [Outcome.INSERTED]
    return deadline


def _stalled(rows: int = 20) -> Firing:
    """A node whose records were produced and are all still in flight (none delivered)."""
    f = Firing.create(auto=False)
    for i in range(rows):
        _schedule(f, f"m{i}", 100)
    f.run_for(150)
    assert len(f.publisher.pending()) == rows
    return f


def test_a_node_whose_peers_deliver_while_it_stalls_gives_its_claims_back() -> None:
    f = _stalled()
    f.run_for(CUT_OFF_AFTER_S * 1000 - 200, step_ms=50)
    f.store.heartbeat(PEER, fired_ago_s=0.1)  # a peer had a record delivered just now
    f.tick()
    assert f.publisher.replaced == []  # not stalled long enough yet
    f.run_for(300, step_ms=50)
    f.store.heartbeat(PEER, fired_ago_s=0.1)
    f.tick()
    assert len(f.publisher.replaced) == 1
    assert "cut off" in f.publisher.replaced[0]
    f.tick()  # the purged records' reports: every row given back, none held
    assert f.store.claimed() == []
    assert KAFKA_WRITES.down  # claims only probes until a delivery succeeds
    assert len(f.store) == 20  # nothing deleted: the peers fire them


def test_a_stall_of_every_node_is_waited_out() -> None:
    """A broker's death: nobody delivers until it is fenced. The records stay in the producer
    (delivered once when writes flow) and the rows stay claimed."""
    f = _stalled()
    f.store.heartbeat(PEER, fired_ago_s=0.0)  # the peer's last delivery came before the stall
    f.run_for(8000, step_ms=50)
    f.store.heartbeat(PEER, fired_ago_s=8.0)  # still beating, delivering nothing since
    f.run_for(2000, step_ms=50)
    assert f.publisher.replaced == []
    assert len(f.store.claimed()) == 20
    assert not KAFKA_WRITES.down
    f.publisher.deliver()  # the new leader takes them
    f.run_for(100, step_ms=10)
    assert len(f.store) == 0


def test_a_peers_delivery_just_before_the_stall_proves_nothing() -> None:
    """A peer's last delivery came up to a heartbeat's lag after this node's stall began (its
    report served a little later): not taken for a peer delivering during the stall."""
    f = _stalled()
    f.run_for(CUT_OFF_AFTER_S * 1000 + 500, step_ms=50)
    stalled_s = CUT_OFF_AFTER_S + 0.65
    f.store.heartbeat(PEER, fired_ago_s=stalled_s - 1.0)  # 1 s after the stall began
    f.run_for(100, step_ms=50)
    assert f.publisher.replaced == []


def test_nothing_in_flight_is_no_stall() -> None:
    f = Firing.create(auto=False)
    f.store.heartbeat(PEER, fired_ago_s=0.0)
    f.run_for(CUT_OFF_AFTER_S * 1000 + 1000, step_ms=100)
    assert f.publisher.replaced == []


def test_the_first_timeout_of_failed_writes_lets_go_of_every_record_held() -> None:
    """Nothing delivered for a whole delivery timeout and a record timed out: the producer is
    replaced, so the records it still holds fail at once and their rows wait as rows (the
    client would send them again under a new epoch at each later timeout, and a leader that
    cannot commit appends every attempt); probes go meanwhile, and no second replacement."""
    f = _stalled(rows=20)
    f.run_for(f.settings.delivery_timeout_ms, step_ms=100)
    first = f.publisher.pending()[0]
    f.publisher.fail([first])  # the first record's delivery timeout
    f.run_for(100, step_ms=10)
    assert len(f.publisher.replaced) == 1
    assert "whole delivery timeout" in f.publisher.replaced[0]
    assert KAFKA_WRITES.down
    f.run_for(2000, step_ms=50)
    assert len(f.publisher.pending()) <= WRITE_PROBE_ROWS  # probes only
    f.publisher.fail(f.publisher.pending())  # the probes time out in their turn
    f.run_for(500, step_ms=50)
    assert len(f.publisher.replaced) == 1  # once per outage
    f.publisher.deliver()
    f.run_for(500, step_ms=10)
    f.publisher.deliver()
    f.run_for(500, step_ms=10)
    assert len(f.store) == 0  # writes back: everything fired
