"""Rate limits in the firing loop: a limited topic or tenant fires at its share of the limit
(the limit divided by the live nodes), what exceeds it waits in the table (never dropped), and
unlimited topics fire as before."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chronos.observability import metrics
from chronos.protocol import ScheduledMessage
from chronos.recurrence import make_rule
from chronos.store import PauseKind
from chronos.testing import ManualClock
from tests.unit.helpers import OUTPUT, Firing


def _due(
    firing: Firing, prefix: str, count: int, topic: str | None = None, tenant: str = ""
) -> None:
    deadline = firing.clock.now() + timedelta(milliseconds=100)
    firing.store.enqueue(
        [
            ScheduledMessage(
                f"{prefix}{i:04d}",
                deadline,
                prefix.encode(),
                b"v",
                [],
                target_topic=topic,
                tenant=tenant,
            )
            for i in range(count)
        ],
        0,
    )


def _fired(firing: Firing, key: bytes) -> int:
    return sum(1 for r in firing.publisher.records if r.key == key)


def test_a_limited_topic_fires_at_its_limit_and_the_rest_waits() -> None:
    firing = Firing.create(claim_batch_size=500)
    firing.store.set_limit(PauseKind.TOPIC, "slow", 100, "ops")
    _due(firing, "s", 2_000, topic="slow")
    _due(firing, "o", 300)
    firing.run_for(5_100, step_ms=5)
    assert _fired(firing, b"o") == 300  # unlimited: all at once
    assert 0.9 * 500 <= _fired(firing, b"s") <= 1.1 * 500  # 5 s at 100 msg/s
    assert len(firing.store) == 2_000 - _fired(firing, b"s")  # the rest waits
    assert metrics.RATE_LIMITED.labels("topic", "slow")._value.get() >= 0


def test_a_limited_tenant_and_the_output_topic() -> None:
    firing = Firing.create(claim_batch_size=500)
    firing.store.set_limit(PauseKind.TENANT, "acme", 50, "ops")
    firing.store.set_limit(PauseKind.TOPIC, OUTPUT, 200, "ops")
    _due(firing, "a", 1_000, tenant="acme")
    _due(firing, "b", 2_000, tenant="other")
    firing.run_for(4_100, step_ms=5)
    assert 0.9 * 200 <= _fired(firing, b"a") <= 1.1 * 200
    assert 0.9 * 800 <= _fired(firing, b"a") + _fired(firing, b"b") <= 1.1 * 800


def test_the_limit_is_shared_between_the_live_nodes_and_cleared() -> None:
    firing = Firing.create(claim_batch_size=500)
    firing.store.heartbeat("00000000-0000-0000-0000-000000000001", started_at=None)
    firing.store.heartbeat(firing.settings.node_id, started_at=None)
    firing.store.set_limit(PauseKind.TOPIC, "slow", 200, "ops")
    _due(firing, "s", 3_000, topic="slow")
    firing.run_for(3_100, step_ms=5)
    assert 0.9 * 300 <= _fired(firing, b"s") <= 1.1 * 300  # half of 200 msg/s
    firing.store.clear_limit(PauseKind.TOPIC, "slow")
    firing.run_for(1_500, step_ms=5)
    assert _fired(firing, b"s") == 3_000


def test_with_two_shards_the_lanes_of_a_node_share_the_limit() -> None:
    """A node fires each shard's messages on a lane of its own: the limit is the cluster's,
    so each lane takes half of it (docs/shards.md), never twice the limit in all."""
    clock = ManualClock()
    lanes = [Firing.create(clock=clock, shards=2, claim_batch_size=500) for _ in range(2)]
    node_id = lanes[0].settings.node_id
    for lane in lanes:
        lane.loop.node_id = node_id  # one node, two shards
        lane.store.heartbeat(node_id, started_at=None)
        lane.store.set_limit(PauseKind.TOPIC, "slow", 200, "ops")
        _due(lane, "s", 2_000, topic="slow")
    for _ in range(int(3_100 / 5)):
        for lane in lanes:
            lane.loop.step()
            lane.loop.dispatcher.fire_due()
            lane.loop.dispatcher.serve_reports()
            lane.loop.finish(force=True)
        clock.advance(5)
    fired = [_fired(lane, b"s") for lane in lanes]
    assert all(0.9 * 300 <= n <= 1.1 * 300 for n in fired), fired  # 100 msg/s each
    assert 0.9 * 600 <= sum(fired) <= 1.1 * 600, fired  # 200 msg/s in all


def test_expired_messages_of_a_limited_topic_are_dead_lettered_not_churned() -> None:
    firing = Firing.create(claim_batch_size=500, max_lateness_ms=1_000, dead_letter_topic="dlt")
    firing.store.set_limit(PauseKind.TOPIC, "slow", 10, "ops")
    _due(firing, "x", 200, topic="slow")
    firing.clock.advance(5_000)  # all past CHRONOS_MAX_LATENESS_MS
    firing.run_for(1_000, step_ms=5)
    assert sum(1 for r in firing.publisher.records if r.topic == "dlt") == 200
    assert firing.store.statements.count("release_claims") == 0  # none given back


def _busiest(times_ms: list[int], window_ms: int) -> int:
    """The most of ``times_ms`` in any window of ``window_ms`` (half-open)."""
    times = sorted(times_ms)
    most, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - window_ms:
            start += 1
        most = max(most, end - start + 1)
    return most


def test_rows_claimed_ahead_spend_their_tokens_when_they_fire_and_hold_the_bound() -> None:
    """2,000 messages due at one instant 3 s ahead, at the default lookahead: the rows claimed
    within the lookahead before their deadline spend tokens at their deadline, so the busiest
    10 s hold the documented bound (the limit x 10 s + half a second's burst), which tokens
    spent at claim time broke by the share x the lookahead (1,132 where 1,050 was promised)."""
    firing = Firing.create(claim_batch_size=500)
    assert firing.settings.lookahead_ms == 1_000  # the default
    firing.store.set_limit(PauseKind.TOPIC, "slow", 100, "ops")
    firing.run_for(2_000, step_ms=5)  # the limit is read long before anything is due
    deadline = firing.clock.now() + timedelta(seconds=3)
    firing.store.enqueue(
        [
            ScheduledMessage(f"s{i:04d}", deadline, b"s", b"v", [], target_topic="slow")
            for i in range(2_000)
        ],
        0,
    )
    firing.run_for(14_000, step_ms=5)
    fired = [r.timestamp_ms for r in firing.publisher.records if r.topic == "slow"]
    assert len(fired) >= 1_000
    assert _busiest(fired, 10_000) <= 100 * 10 + 100 * 0.5 + 1, _busiest(fired, 10_000)


def test_a_limit_on_the_output_topic_holds_the_rows_that_name_it() -> None:
    """A row whose chronosTopic names the output topic is the output topic's: one bucket."""
    firing = Firing.create(claim_batch_size=500)
    firing.store.set_limit(PauseKind.TOPIC, OUTPUT, 10, "ops")
    _due(firing, "n", 200, topic=OUTPUT)  # named
    _due(firing, "u", 200)  # unnamed
    firing.run_for(2_100, step_ms=5)
    assert _fired(firing, b"n") + _fired(firing, b"u") <= 10 * 2.1 + 10 * 0.5 + 1


EVERY_SECOND = (make_rule("PT1S", None, None, None, "latest") or pytest.fail("no rule")).encode()


def test_a_limited_series_spends_tokens_even_past_its_expiry() -> None:
    """A series' latest missed occurrence is not expired: it fires, so it spends a token (the
    expiry's exemption is for one-shot rows, which are dead-lettered)."""
    firing = Firing.create(claim_batch_size=500, max_lateness_ms=1_000, dead_letter_topic="dlt")
    firing.store.set_limit(PauseKind.TOPIC, "slow", 1, "ops")
    deadline = firing.clock.now() + timedelta(milliseconds=100)
    firing.store.enqueue(
        [
            ScheduledMessage(
                f"series{i}", deadline, b"r", b"v", [], target_topic="slow", recurrence=EVERY_SECOND
            )
            for i in range(20)
        ],
        0,
    )
    firing.clock.advance(5_000)  # every series' occurrence past CHRONOS_MAX_LATENESS_MS
    firing.run_for(3_000, step_ms=5)
    fired = sum(1 for r in firing.publisher.records if r.topic == "slow")
    assert fired <= 1 * 3 + 1 + 1, fired
