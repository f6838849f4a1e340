"""The paced catch-up in the firing loop: an overdue backlog fires at CHRONOS_CATCHUP_RATE (this
node's share of the live nodes), messages coming due now fire on time meanwhile, and without the
setting the backlog fires as fast as it can."""

from __future__ import annotations

from datetime import timedelta

from chronos.protocol import ScheduledMessage
from tests.unit.helpers import OUTPUT, Firing


def _backlog(firing: Firing, count: int) -> None:
    deadline = firing.clock.now() + timedelta(milliseconds=100)
    firing.store.enqueue(
        [ScheduledMessage(f"old{i:04d}", deadline, b"old", b"v", []) for i in range(count)], 0
    )
    firing.clock.advance(5_000)  # every node away: all 4.9 s overdue


def _fired(firing: Firing, key: bytes) -> int:
    return sum(1 for r in firing.publisher.records if r.topic == OUTPUT and r.key == key)


def test_the_backlog_fires_at_the_rate_and_a_message_due_now_on_time() -> None:
    firing = Firing.create(catchup_rate=200, claim_batch_size=500)
    _backlog(firing, 2_000)
    soon = firing.clock.now() + timedelta(milliseconds=1_000)
    firing.store.enqueue([ScheduledMessage("new", soon, b"new", b"v", [])], 0)
    firing.run_for(950, step_ms=5)
    assert _fired(firing, b"new") == 1  # fired within the timing advance, not after the backlog
    firing.run_for(4_050, step_ms=5)
    assert 0.9 * 1_000 <= _fired(firing, b"old") <= 1.1 * 1_000  # 5 s at 200 msg/s


def test_the_rate_is_shared_between_the_live_nodes() -> None:
    firing = Firing.create(catchup_rate=200, claim_batch_size=500)
    for n in range(3):  # this node and one peer live; one peer long dead
        firing.store.heartbeat(f"00000000-0000-0000-0000-00000000000{n}", started_at=None)
    firing.clock.advance(60_000)
    _backlog(firing, 2_000)
    firing.store.heartbeat("00000000-0000-0000-0000-000000000001", started_at=None)
    firing.store.heartbeat(firing.settings.node_id, started_at=None)
    firing.run_for(5_000, step_ms=5)
    assert 0.9 * 500 <= _fired(firing, b"old") <= 1.1 * 500  # 100 msg/s: half the rate


def test_without_a_rate_the_backlog_fires_at_once() -> None:
    firing = Firing.create(claim_batch_size=500)
    _backlog(firing, 2_000)
    firing.run_for(500, step_ms=5)
    assert _fired(firing, b"old") == 2_000


def test_with_two_shards_each_lane_takes_half_the_rate() -> None:
    """A node fires each shard's backlog on a lane of its own: the rate is the cluster's."""
    firing = Firing.create(catchup_rate=200, claim_batch_size=500, shards=2)
    _backlog(firing, 2_000)
    firing.run_for(5_000, step_ms=5)
    assert 0.9 * 500 <= _fired(firing, b"old") <= 1.1 * 500  # 100 msg/s: this shard's half


def test_a_share_under_four_a_second_still_fires() -> None:
    """2 msg/s over two shards: each lane's share is 1 a second, a quarter of a token a bucket
    of BURST_S would hold; the bucket holds one token at least, so the backlog still drains."""
    firing = Firing.create(catchup_rate=2, claim_batch_size=500, shards=2)
    _backlog(firing, 100)
    firing.run_for(10_000, step_ms=5)
    assert 8 <= _fired(firing, b"old") <= 12  # 1 msg/s: this shard's half
