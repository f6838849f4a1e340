"""A stall of the database is not a peer's death (manual clock).

When every node's statements hang together (a commit stall: an fsync that takes seconds, a
synchronous standby gone), heartbeats look lapsed and claims look stuck the moment the database
resumes, although their nodes are alive and about to renew and finish them. The leader judges
by a liveness window and a hold time lengthened by the stall it saw itself; the holder counts a
claim's hold from when it sent the claim (``tests/unit/firing/test_loop.py``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from chronos.cluster.leadership import STALL_S, Leadership
from chronos.cluster.monitor import Monitor
from chronos.cluster.recovery import RecoveryLoop
from chronos.firing.loop import FiringLoop
from chronos.testing import FakePublisher, InMemoryStore, ManualClock
from tests.support.store_contract import msg
from tests.unit.helpers import OUTPUT, settings

WINDOW = 5000


def ids(count: int) -> list[str]:
    return [str(u) for u in sorted(uuid.uuid4() for _ in range(count))]


# ------------------------------------------------------------------- what a node counts as one


def test_a_statement_held_up_longer_than_STALL_S_is_a_stall() -> None:
    now = [100.0]
    lead = Leadership(ids(1)[0], WINDOW, monotonic=lambda: now[0])
    now[0] += STALL_S
    lead.renew(100.0)  # exactly STALL_S: slow, not a stall
    assert lead.stalled_within(5.0) == 0
    now[0] += 5.0
    lead.answered(now[0] - 3.0, timed=False)  # a batch's statement: slow, no stall
    assert lead.stalled_within(5.0) == 0
    lead.answered(now[0] - STALL_S - 0.001)
    assert lead.stalled_within(5.0) == pytest.approx(STALL_S + 0.001)


def test_failed_statements_stall_from_the_first_send_until_one_succeeds() -> None:
    now = [100.0]
    lead = Leadership(ids(1)[0], WINDOW, monotonic=lambda: now[0])
    lead.unanswered(100.0)
    now[0] = 102.0
    lead.unanswered(101.0)  # the stall began with the first
    assert lead.stalled_within(5.0) == pytest.approx(2.0)  # in progress: up to now
    now[0] = 103.5
    lead.answered(103.4)  # a quick answer ends it
    now[0] = 104.0
    assert lead.stalled_within(5.0) == pytest.approx(3.5)


def test_the_stalls_counted_are_those_within_the_last_span_of_time_without_one() -> None:
    now = [100.0]
    lead = Leadership(ids(1)[0], WINDOW, monotonic=lambda: now[0])
    lead.unanswered(101.0)  # the failure detector's statement failed in the stall...
    now[0] = 106.0
    lead.answered(105.9, timed=False)  # ...and its next one worked (how fast does not count)
    now[0] = 107.0
    lead.answered(100.0)  # the heartbeat held up 7 s, the same stall
    assert lead.stalled_within(5.0) == pytest.approx(7.0)  # one stall, counted once
    assert lead.stalled_within(5.0, now=107.0 + 4.999) == pytest.approx(7.0)
    assert lead.stalled_within(5.0, now=107.0 + 5.0) == 0  # 5 s without a stall since
    # Two stalls with 3 s between them: a span of 5 s reaches back over both.
    now[0] = 112.0
    lead.answered(110.0)
    assert lead.stalled_within(5.0, now=113.0) == pytest.approx(9.0)
    assert lead.stalled_within(2.0, now=113.0) == pytest.approx(2.0)


# ------------------------------------------------------------------- the leader after a stall


class HeldUp(InMemoryStore):
    """A store whose next heartbeat the database holds up ``held_ms``: stamped with ``now()`` as
    it starts, answered ``held_ms`` later (a commit stall)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.manual = clock
        self.held_ms = 0.0

    def heartbeat(self, node_id: str, **kwargs: Any) -> None:
        super().heartbeat(node_id, **kwargs)
        if self.held_ms:
            self.manual.advance(self.held_ms)
            self.held_ms = 0.0


class Leader:
    """A leader (monitor and failure detector) and a peer that is only rows in the store."""

    def __init__(self, **overrides: Any) -> None:
        self.clock = ManualClock()
        self.store = HeldUp(self.clock)
        self.me, self.peer = ids(2)
        config = settings(node_id=self.me, liveness_window_ms=WINDOW, **overrides)
        self.lead = Leadership(self.me, WINDOW, monotonic=self.clock.monotonic)
        self.monitor = Monitor(config, self.store, self.lead, backlog_interval=0.0)
        self.recovery = RecoveryLoop(config, self.store, self.lead)
        later = self.clock.now() + timedelta(hours=1)
        self.store.enqueue([msg(f"p{i}", later) for i in range(3)], 0)
        self.store.heartbeat(self.peer)
        self.monitor.tick(self.clock.monotonic())
        assert self.lead.is_leader()
        assert len(self.store.claim(self.peer, 4_000_000, 3, 10)) == 3

    def stall(self, ms: float) -> None:
        """Every statement hangs ``ms``: the peer's heartbeat and this node's are stamped now and
        committed at the end, the leader learns of it as its heartbeat comes back."""
        self.store.heartbeat(self.peer)
        self.store.held_ms = ms
        self.monitor.tick(self.clock.monotonic())
        self.monitor.tick(self.clock.monotonic())  # the next heartbeat is quick
        assert self.lead.is_leader()

    def beat_until(self, ms: float, *, peer: bool) -> None:
        """Heartbeats every second (the peer's too, if ``peer``) until ``ms`` from now."""
        end = self.clock.monotonic() + ms / 1000
        while self.clock.monotonic() + 1.0 < end:
            self.clock.advance(1000)
            self.monitor.tick(self.clock.monotonic())
            if peer:
                self.store.heartbeat(self.peer)
        self.clock.advance(round((end - self.clock.monotonic()) * 1000, 3))


def test_after_a_stall_a_silent_peer_is_taken_over_a_window_after_it_not_at_once() -> None:
    c = Leader(hold_time_ms=30_000)
    c.clock.advance(500)
    c.stall(WINDOW + 2000)  # the peer's heartbeat is now 7 s old
    assert c.recovery.run_once() == 0  # it had no chance to renew yet: alive, for all we know
    c.beat_until(WINDOW - 1, peer=False)
    assert c.recovery.run_once() == 0
    c.clock.advance(2)  # a whole window of fresh heartbeats since the stall, none from it
    assert c.recovery.run_once() == 3
    assert c.store.claimed() == []


def test_after_a_stall_a_peers_claims_are_judged_a_hold_time_after_it() -> None:
    hold = 6000
    c = Leader(hold_time_ms=hold, delivery_timeout_ms=3000)
    c.stall(hold + 2000)  # the peer claimed as it began: its claims are 8 s old
    assert c.recovery.run_once() == 0  # its delete may be on its way
    c.beat_until(hold - 1, peer=True)
    assert c.recovery.run_once() == 0
    c.clock.advance(2)  # a whole hold time since the stall, and they are still claimed
    assert c.recovery.run_once() == 3
    assert c.store.claimed() == []


def test_a_dead_node_is_still_taken_over_right_after_a_stall() -> None:
    c = Leader(hold_time_ms=30_000)
    dead = str(uuid.uuid4())
    c.store.enqueue([msg("d", c.clock.now() + timedelta(hours=1))], 0)
    c.store.heartbeat(dead)
    assert len(c.store.claim(dead, 4_000_000, 1, 10)) == 1
    c.clock.advance(WINDOW + 500)  # dead: its heartbeat lapsed before the stall
    c.monitor.tick(c.clock.monotonic())
    c.store.heartbeat(c.peer)
    c.stall(3000)
    # Lapsed by a window lengthened by the stall (8 s): the dead node's claim, not the peer's.
    assert c.recovery.run_once() == 1
    assert [r.id for r in c.store.claimed()] == ["p0", "p1", "p2"]


# ------------------------------------------------------- two nodes, every statement held up


class CommitStall(InMemoryStore):
    """While ``flowing`` is clear every statement reads ``now()`` as it arrives, then hangs until
    it is set again, and takes effect with that ``now()``: a database whose commits all hang
    (an fsync, a synchronous standby gone) and resume together."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.manual = clock
        self.clock = self._now
        self.flowing = threading.Event()
        self.flowing.set()
        self.hung = 0
        self._started = threading.local()

    def _now(self) -> datetime:
        started: datetime | None = getattr(self._started, "at", None)
        return started if started is not None else self.manual.now()

    def _statement(self, name: str) -> datetime:
        self._started.at = None
        if not self.flowing.is_set():
            self._started.at = self.manual.now()
            self.hung += 1
            self._lock.release()  # the statements in use take the store's lock once
            try:
                assert self.flowing.wait(10), "the stall never ended"
            finally:
                self._lock.acquire()
        return super()._statement(name)


@dataclass
class Node:
    lead: Leadership
    monitor: Monitor
    recovery: RecoveryLoop
    firing: FiringLoop
    publisher: FakePublisher

    def tick(self) -> None:
        """What the firing loop's two threads do by now (as ``tests.unit.helpers.Firing``)."""
        self.firing.step()
        self.firing.dispatcher.fire_due()
        self.firing.dispatcher.serve_reports()
        self.firing.finish(force=True)


def make_node(node_id: str, clock: ManualClock, store: InMemoryStore) -> Node:
    config = settings(node_id=node_id, liveness_window_ms=WINDOW, claim_batch_size=5)
    lead = Leadership(node_id, WINDOW, monotonic=clock.monotonic)
    publisher = FakePublisher(wall_clock=lambda: clock.now().timestamp())
    return Node(
        lead,
        Monitor(config, store, lead, backlog_interval=0.0),
        RecoveryLoop(config, store, lead),
        FiringLoop(config, store, publisher, lead, monotonic=clock.monotonic),
        publisher,
    )


def run(clock: ManualClock, nodes: list[Node], ms: int) -> None:
    """Every node for ``ms``: firing every 10 ms, heartbeats every second, sweeps every 500."""
    for elapsed in range(10, ms + 1, 10):
        clock.advance(10)
        for node in nodes:
            node.tick()
            if elapsed % 1000 == 0:
                node.monitor.tick(clock.monotonic())
            if elapsed % 500 == 0:
                node.recovery.run_once()


def test_two_nodes_through_a_stall_longer_than_the_hold_time_fire_each_message_once() -> None:
    """The finding: a, the leader, and b each hold claims when every statement hangs for the
    hold time and more. Each fired its claims on time in the stall (delivered; the deletes
    hang), and each had a claim statement under way (stamped when it started, answered at the
    end). When the database resumes, b's fresh heartbeat lands before a's: b elects itself (a's
    last heartbeat is older than the window), and a leads too. Each takes the other's claims over
    (older than the hold time) while the other still fires them or is about to delete them."""
    clock = ManualClock()
    store = CommitStall(clock)
    a, b = (make_node(n, clock, store) for n in ids(2))
    for node in (a, b, a, b):
        node.monitor.tick(clock.monotonic())
    assert a.lead.is_leader() and not b.lead.is_leader()
    due = clock.now() + timedelta(milliseconds=600)
    held = [msg(f"held-{i}", due, value=f"held-{i}".encode()) for i in range(10)]
    store.enqueue(held, 0)
    a.tick()  # five each
    b.tick()
    assert len(store.claimed()) == 10
    # Due just past the lookahead: claimed by the claims under way as the stall begins.
    due = clock.now() + timedelta(milliseconds=1100)
    late = [msg(f"in-flight-{i}", due, value=f"in-flight-{i}".encode()) for i in range(10)]
    store.enqueue(late, 0)
    clock.advance(150)

    store.flowing.clear()  # the stall: every statement from now on hangs
    hung = [
        threading.Thread(target=work, daemon=True)
        for node in (a, b)
        for work in (node.monitor.beat, node.firing.step)
    ]
    for thread in hung:
        thread.start()
    limit = time.monotonic() + 10
    while store.hung < len(hung) and time.monotonic() < limit:
        time.sleep(0.001)
    assert store.hung == len(hung), "a claim or a heartbeat did not reach the database"
    clock.advance(550)  # the held rows are due: fired in the stall (their leases hold)
    for node in (a, b):
        node.firing.dispatcher.fire_due()
        node.firing.dispatcher.serve_reports()
    assert sum(len(n.publisher.delivered()) for n in (a, b)) == 10
    clock.advance(WINDOW + 2000 - 550)  # longer than the hold time and the liveness window
    store.flowing.set()  # the database resumes: every hung statement is answered
    for thread in hung:
        thread.join(5)
    assert not any(t.is_alive() for t in hung)

    b.monitor.tick(clock.monotonic())  # b's fresh heartbeat first: a's looks lapsed
    a.monitor.tick(clock.monotonic())
    assert a.lead.is_leader() and b.lead.is_leader()  # two leaders for a moment
    a.recovery.run_once()
    b.recovery.run_once()
    run(clock, [a, b], 5000)

    fired = Counter(r.value or b"" for n in (a, b) for r in n.publisher.delivered(OUTPUT))
    expected = {m.id.encode() for m in held + late}
    assert set(fired) == expected  # none lost
    assert {v.decode(): n for v, n in fired.items() if n > 1} == {}  # none fired twice
    assert len(store) == 0
