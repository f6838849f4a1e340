"""Rate limits in the firing loop: a limited topic or tenant fires at its share of the limit
(the limit divided by the live nodes), what exceeds it waits in the table (never dropped), and
unlimited topics fire as before."""

from __future__ import annotations

from datetime import timedelta

from chronos.observability import metrics
from chronos.protocol import ScheduledMessage
from chronos.store import PauseKind
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


def test_expired_messages_of_a_limited_topic_are_dead_lettered_not_churned() -> None:
    firing = Firing.create(claim_batch_size=500, max_lateness_ms=1_000, dead_letter_topic="dlt")
    firing.store.set_limit(PauseKind.TOPIC, "slow", 10, "ops")
    _due(firing, "x", 200, topic="slow")
    firing.clock.advance(5_000)  # all past CHRONOS_MAX_LATENESS_MS
    firing.run_for(1_000, step_ms=5)
    assert sum(1 for r in firing.publisher.records if r.topic == "dlt") == 200
    assert firing.store.statements.count("release_claims") == 0  # none given back
