"""Ready-and-fire against the in-memory store and the fake publisher, on a manual clock."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import REGISTRY

from chronos.firing.loop import FiringLoop
from chronos.kafka import is_permanent
from chronos.kafka.clients import DELIVERY_TIMED_OUT
from chronos.protocol import DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SOURCE_HEADER
from chronos.store import ClaimedRow, Outcome
from chronos.testing import FakePublisher, InMemoryStore, ManualClock, unfenced
from tests.support.store_contract import msg
from tests.unit.helpers import DEAD_LETTER, OUTPUT, Firing, settings


def _schedule(f: Firing, message_id: str, in_ms: float, **kwargs: object) -> datetime:
    deadline = f.at(in_ms)
    assert f.store.enqueue([msg(message_id, deadline, **kwargs)], 0) == [  # type: ignore[arg-type]
        Outcome.INSERTED
    ]
    return deadline


def test_fires_at_deadline_minus_advance_never_before() -> None:
    f = Firing.create(timing_advance_ms=50, lookahead_ms=1000)
    deadline = _schedule(f, "m", 800)
    f.tick()
    assert [r.id for r in f.store.claimed()] == ["m"]  # claimed ahead, held on a timer
    f.run_for(749)
    assert f.publisher.records == []  # 1 ms before deadline - advance: not yet
    f.run_for(2)
    (record,) = f.publisher.records
    assert record.topic == OUTPUT
    earliest = round((deadline - timedelta(milliseconds=50)).timestamp() * 1000)
    assert earliest <= record.timestamp_ms <= earliest + 1
    assert len(f.store) == 0  # delivered, then deleted


def test_record_is_relayed_byte_exact_without_chronos_headers() -> None:
    f = Firing.create()
    headers = [("h", b"\x00\x01"), ("h", None), ("e", b"")]
    _schedule(f, "b", 100, key=b"\xff\x00", value=None, headers=headers)
    f.run_for(100)
    (record,) = f.publisher.records
    assert (record.key, record.value, record.headers) == (b"\xff\x00", None, headers)


def test_rows_due_beyond_the_lookahead_wait_in_the_table() -> None:
    f = Firing.create(lookahead_ms=1000, timing_advance_ms=50, poll_interval_ms=100)
    _schedule(f, "far", 5000)
    f.tick()
    assert f.store.claimed() == []
    f.run_for(3900, step_ms=10)
    assert f.store.claimed() == []  # 1100 ms left: beyond lookahead + advance
    f.run_for(200, step_ms=10)
    assert f.store.claimed() != []  # claimed within lookahead + advance of its deadline
    assert f.publisher.records == []
    f.run_for(900, step_ms=10)
    assert len(f.publisher.records) == 1


def test_row_is_deleted_only_after_its_delivery_report() -> None:
    f = Firing.create(auto=False)
    _schedule(f, "d", 100)
    f.run_for(100)
    assert len(f.publisher.pending()) == 1
    f.run_for(50)
    assert [r.id for r in f.store.claimed()] == ["d"]  # produced, not confirmed: kept
    f.publisher.deliver()
    f.tick()
    assert len(f.store) == 0


def test_transient_failure_gives_the_row_back_without_counting_an_attempt() -> None:
    f = Firing.create(auto=False)
    _schedule(f, "t", 100)
    f.run_for(100)
    f.publisher.fail(code=KafkaError._MSG_TIMED_OUT)
    f.tick()
    row = f.store.get("t")
    assert row is not None
    assert (row.readied_at, row.attempts) == (None, 0)
    assert row.last_error is not None and row.last_error.startswith(DELIVERY_TIMED_OUT)
    f.publisher.auto = True
    f.run_for(2000, step_ms=10)  # claiming backs off a little, then it is fired again
    assert [r.status for r in f.publisher.records] == ["failed", "delivered"]
    assert len(f.store) == 0


def test_permanent_refusals_count_and_end_in_the_dead_letter_topic() -> None:
    f = Firing.create(max_publish_attempts=2)
    f.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.topic == OUTPUT else None
    )
    _schedule(f, "big", 100, key=b"k", value=b"v", headers=[("a", b"1")])
    f.run_for(3000, step_ms=10)
    topics = [r.topic for r in f.publisher.records]
    assert topics == [OUTPUT, OUTPUT, DEAD_LETTER]
    dead = f.publisher.records[-1]
    assert (dead.key, dead.value) == (b"k", b"v")
    assert dead.headers[0] == ("a", b"1")
    reasons = dict(dead.headers[1:])
    reason = reasons[DEAD_LETTER_REASON_HEADER]
    assert reason is not None and b"failed 2 times" in reason
    assert reasons[DEAD_LETTER_SOURCE_HEADER] == b"chronos/big"
    assert reasons["chronosDeadLetterCode"] == b"publish_failed"
    assert len(f.store) == 0


def test_permanent_error_codes() -> None:
    assert is_permanent(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert not is_permanent(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not is_permanent(KafkaError(KafkaError._TRANSPORT))
    assert not is_permanent(None)


def test_a_claim_held_past_the_hold_time_is_not_fired_but_given_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A paused node must not fire what a peer may already have taken over; as no failure
    detector resets a node's own claims, it gives them back itself (fenced)."""
    f = Firing.create(hold_time_ms=3000, lookahead_ms=1000, delivery_timeout_ms=1000)
    _schedule(f, "p", 500)
    f.tick()
    assert f.store.claimed()
    f.clock.advance(3000)  # the process was paused for the whole hold time
    with caplog.at_level(logging.WARNING):
        f.tick()
    assert f.publisher.records == []
    assert not f.store.claimed()  # given back: waiting again, for any node to claim
    assert len(f.store) == 1
    assert "expired" in caplog.text
    f.tick()
    f.clock.advance(1000)
    f.tick()
    assert [r.status for r in f.publisher.records] == ["delivered"]  # fired once, later


class StalledClaims(InMemoryStore):
    """A store whose next claim that takes rows is held up ``stall_ms`` by the database, as a
    commit stall holds it in Postgres: ``now()`` (the claim's stamp, the time left until each
    deadline) is read as the statement starts, the result arrives ``stall_ms`` later."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.manual = clock
        self.stall_ms = 0.0

    def claim(self, *args: Any, **kwargs: Any) -> list[ClaimedRow]:
        rows = super().claim(*args, **kwargs)
        if rows and self.stall_ms:
            self.manual.advance(self.stall_ms)
            self.stall_ms = 0.0
            rows = [r._replace(claimed_monotonic=self.monotonic()) for r in rows]
        return rows


def test_a_claim_the_database_held_up_past_the_hold_time_is_given_back_not_fired() -> None:
    """A claim whose commit hung (an fsync, a synchronous standby gone: no statement timeout
    bounds a commit) comes back stamped with the database's clock of its start: a peer may take
    it over a hold time after that, however late the result arrived. The holder counts its hold
    from the send, so it gives such rows back rather than fire them beside the peer."""
    clock = ManualClock()
    store = StalledClaims(clock)
    publisher = FakePublisher(wall_clock=lambda: clock.now().timestamp())
    config = settings(hold_time_ms=3000, lookahead_ms=1000, delivery_timeout_ms=1000)
    lease = unfenced(config.node_id)
    loop = FiringLoop(config, store, publisher, lease, monotonic=clock.monotonic)
    f = Firing(clock, store, publisher, loop, config)
    _schedule(f, "s", 500)
    store.stall_ms = 2600  # its timer (450 ms left when the claim began) is due at 3050 ms
    f.tick()
    assert f.store.claimed() and f.publisher.records == []
    f.run_for(449)  # 1 ms before the timer: the claim is 3049 ms old, past the hold time
    assert f.store.claimed() and f.publisher.records == []
    f.run_for(2)  # the timer is due
    assert f.publisher.records == []  # not fired (a peer's sweep may reset it by now)...
    assert f.store.claimed() == []  # ...but given back
    f.run_for(200)
    assert [(r.status, r.value) for r in f.publisher.records] == [("delivered", b"v")]


def test_a_row_taken_over_by_a_peer_is_not_deleted(caplog: pytest.LogCaptureFixture) -> None:
    f = Firing.create(auto=False)
    _schedule(f, "x", 100)
    f.run_for(100)
    assert f.publisher.pending()
    # A peer suspected this node, reset the row and claimed it again meanwhile.
    f.clock.advance(10)
    stuck = f.store.find_stuck(0, 10)
    assert f.store.reset_stuck(stuck)
    peer = str(uuid.uuid4())
    assert f.store.claim(peer, 1000, 10, 10)
    f.publisher.deliver()
    with caplog.at_level(logging.WARNING):
        f.tick()
    row = f.store.get("x")
    assert row is not None and row.readied_by == peer
    assert "no longer claimed" in caplog.text


def test_a_backlog_is_claimed_again_at_once() -> None:
    f = Firing.create(claim_batch_size=2, poll_interval_ms=900)
    for i in range(5):
        _schedule(f, f"b{i}", 10)
    f.tick()
    f.tick()
    f.tick()
    assert len(f.store.claimed()) + len(f.publisher.records) == 5  # no poll interval between


def test_max_in_flight_bounds_what_a_node_holds() -> None:
    f = Firing.create(max_in_flight=3, auto=False)
    for i in range(10):
        _schedule(f, f"c{i}", 500)
    f.run_for(300, step_ms=10)
    assert len(f.store.claimed()) == 3


def test_claim_errors_back_off_and_recover() -> None:
    f = Firing.create(poll_interval_ms=100)
    _schedule(f, "r", 50)
    f.store.fail_next(3, "claim_due")
    f.run_for(5000, step_ms=10)
    assert [r.status for r in f.publisher.records] == ["delivered"]
    assert len(f.store) == 0


def test_a_failed_delete_is_tried_again_by_the_node_itself() -> None:
    """No failure detector resets a node's own claims: a failed delete is retried."""
    f = Firing.create()
    _schedule(f, "z", 50)
    f.store.fail_next(1, "delete_fired")
    f.run_for(100)
    assert len(f.publisher.records) == 1
    assert f.store.statements.count("delete_fired") == 2
    assert len(f.store) == 0  # delivered once, deleted on the second try


def test_drain_gives_back_unfired_rows_and_deletes_delivered_ones() -> None:
    f = Firing.create(lookahead_ms=1000)
    _schedule(f, "soon", 100)
    _schedule(f, "later", 900)
    f.run_for(150)
    assert [r.id for r in f.store.claimed()] == ["later"]
    f.loop.drain()
    assert f.store.claimed() == []
    assert sorted(f.store.rows()) == ["later"]


def test_drain_waits_for_outstanding_reports() -> None:
    f = Firing.create(auto=False, shutdown_timeout_ms=4000)
    _schedule(f, "w", 50)
    f.run_for(60)
    assert f.publisher.pending()
    timer = threading.Timer(0.2, f.publisher.deliver)
    timer.start()
    try:
        f.loop.drain()
    finally:
        timer.cancel()
    assert len(f.store) == 0
    assert f.store.claimed() == []


def test_the_loop_on_real_threads_fires_everything_once_never_early() -> None:
    store = InMemoryStore()
    publisher = FakePublisher()
    config = settings(timing_advance_ms=20, poll_interval_ms=20, lookahead_ms=500)
    loop = FiringLoop(config, store, publisher, unfenced(config.node_id))
    now = datetime.now(UTC)
    deadlines = {f"r{i}": now + timedelta(milliseconds=50 + 10 * i) for i in range(30)}
    store.enqueue([msg(i, d, value=i.encode()) for i, d in deadlines.items()], 0)
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        limit = time.monotonic() + 5
        while len(publisher.delivered()) < len(deadlines) and time.monotonic() < limit:
            time.sleep(0.01)
    finally:
        loop.stop()
        thread.join(5)
    assert not thread.is_alive()
    fired = {r.value.decode(): r.timestamp_ms for r in publisher.delivered() if r.value}
    assert sorted(fired) == sorted(deadlines)  # each exactly once
    assert len(publisher.records) == len(deadlines)
    for message_id, deadline in deadlines.items():
        earliest_ms = (deadline - timedelta(milliseconds=20)).timestamp() * 1000
        assert fired[message_id] >= earliest_ms - 1, message_id  # 1 ms: CreateTime truncation
    assert len(store) == 0


# -------------------------------------------------------- database errors retried, bugs not
# A bug must stop the node (the orchestrator restarts it, the logs show it), not be counted as a
# database error and retried for ever.


def _database_errors(operation: str) -> float:
    value = REGISTRY.get_sample_value("chronos_database_errors_total", {"operation": operation})
    return value or 0.0


def test_a_store_error_in_the_claim_is_retried_later() -> None:
    f = Firing.create()
    f.store.fail_next(1, "claim_due")
    before = _database_errors("claim")
    f.loop.step()  # no exception: the claim backs off
    assert _database_errors("claim") == before + 1


def test_a_bug_in_the_claim_is_not_taken_for_a_database_error() -> None:
    f = Firing.create()

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise TypeError("a programming bug")

    f.store.claim = broken  # type: ignore[method-assign]
    before = _database_errors("claim")
    with pytest.raises(TypeError):
        f.loop.step()
    assert _database_errors("claim") == before


def test_failing_writes_mark_kafka_writes_down_until_a_delivery() -> None:
    """Two of three brokers down: metadata answers, every write fails. The firing loop's
    deliveries say so (readiness, one log line per change), not the broker probe."""
    from chronos.observability.dependencies import KAFKA_WRITES

    KAFKA_WRITES.reset()
    f = Firing.create(auto=False)
    _schedule(f, "t", 100)
    f.run_for(100)
    f.publisher.fail(code=KafkaError.NOT_ENOUGH_REPLICAS)
    f.tick()
    assert KAFKA_WRITES.down
    f.publisher.auto = True
    f.run_for(2000, step_ms=10)
    assert not KAFKA_WRITES.down
    assert len(f.store) == 0


def test_while_writes_fail_only_a_few_rows_are_claimed_to_probe() -> None:
    """Each failed attempt can leave a copy (a leader appended the record but could not commit
    it): while writes fail, the loop holds a few rows only, until one is delivered."""
    from chronos.firing.loop import WRITE_PROBE_ROWS
    from chronos.observability.dependencies import KAFKA_WRITES

    f = Firing.create(auto=False)
    for i in range(50):
        _schedule(f, f"r{i}", 100)
    KAFKA_WRITES.failed("NOT_ENOUGH_REPLICAS")
    f.run_for(200)
    assert len(f.store.claimed()) <= WRITE_PROBE_ROWS
    f.publisher.auto = True
    f.publisher.deliver()
    f.run_for(3000, step_ms=10)
    assert not KAFKA_WRITES.down
    assert len(f.store) == 0


def test_a_failure_beside_recent_deliveries_does_not_mark_the_writes_down() -> None:
    """One partition's leader moving while the others take records is not a write outage
    (the state would flap, a log line each way per batch)."""
    from chronos.observability.dependencies import KAFKA_WRITES

    f = Firing.create(auto=False)
    _schedule(f, "ok", 100)
    _schedule(f, "moving", 150)
    f.run_for(110)
    f.publisher.deliver()
    f.tick()
    f.run_for(100)
    f.publisher.fail(code=KafkaError._MSG_TIMED_OUT)
    f.tick()
    assert not KAFKA_WRITES.down


def test_writes_back_after_an_outage_are_found_and_used_within_a_second() -> None:
    """Failed batches back the claims off (doubling while writes fail), but a probe goes out at
    least once a second (it holds a few rows only), and the first delivery ends the back-off:
    what came due meanwhile fires at once, not when the longest back-off of the outage runs out
    (a broker's death measured 5 s more lateness for every row given back)."""
    from chronos.observability.dependencies import KAFKA_WRITES

    KAFKA_WRITES.reset()
    f = Firing.create(auto=False, poll_interval_ms=100, lookahead_ms=200)
    for i in range(6):
        _schedule(f, f"held{i}", 50)
    f.run_for(100, step_ms=10)
    held = f.publisher.pending()
    assert len(held) == 6
    for record in held:  # the reports of an outage arrive in several batches
        if record in f.publisher.pending():  # (the first replaces the producer: purged)
            f.publisher.fail([record], code=KafkaError._MSG_TIMED_OUT)
        f.tick()
    assert KAFKA_WRITES.down
    for i in range(20):
        _schedule(f, f"due{i}", 50)
    f.publisher.auto = True  # the broker is back
    f.run_for(1300, step_ms=10)
    assert not KAFKA_WRITES.down
    assert len(f.store) == 0, sorted(r.id for r in f.store.claimed())
