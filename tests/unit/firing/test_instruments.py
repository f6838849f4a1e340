"""Honest instruments: chronos_fired_messages_total counts only messages delivered to their
own topic (not dead letters, not rows a peer had taken over), and the lateness histogram is
measured on the database clock the timers use, never the node's wall clock; the per-tenant
counters count by tenant label."""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaError
from prometheus_client import REGISTRY

from chronos.observability.tenants import OTHER
from chronos.store import ClaimedRow, Outcome
from tests.support.store_contract import msg
from tests.unit.helpers import OUTPUT, Firing


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_dead_letters_are_not_counted_as_fired() -> None:
    f = Firing.create(max_publish_attempts=2)
    assert f.store.enqueue([msg("big", f.at(100), key=b"big")], 0) == [Outcome.INSERTED]
    assert f.store.enqueue([msg("ok", f.at(100), key=b"ok")], 0) == [Outcome.INSERTED]
    f.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.topic == OUTPUT and r.key == b"big" else None
    )
    before = _sample("chronos_fired_messages_total")
    f.run_for(3000, step_ms=10)
    assert len(f.store) == 0  # both done: one fired, one dead-lettered
    assert _sample("chronos_fired_messages_total") - before == 1


def test_lateness_is_measured_on_the_database_clock_not_the_wall_clock() -> None:
    # The test's clock is the "database" clock (the claim's time left is measured on it); the
    # process's own wall clock (time.time()) is another one, days apart from it here.
    f = Firing.create(timing_advance_ms=50, lookahead_ms=1000)
    assert f.store.enqueue([msg("m", f.at(500))], 0) == [Outcome.INSERTED]

    # The histogram has negative bounds, so it has no _sum (prometheus_client leaves it out):
    # the buckets tell where the one lateness fell.
    def buckets() -> tuple[float, float, float]:
        return (
            _sample("chronos_fire_lateness_seconds_count"),
            _sample("chronos_fire_lateness_seconds_bucket", le="-0.1"),
            _sample("chronos_fire_lateness_seconds_bucket", le="0.0"),
        )

    assert REGISTRY.get_sample_value("chronos_fire_lateness_seconds_sum") is None
    count, below, up_to_zero = buckets()
    f.run_for(1000, step_ms=1)
    # Fired within the timing advance: -0.1 < lateness <= 0 (the wall clock would put it days
    # off, far outside both bounds).
    assert buckets() == (count + 1, below, up_to_zero + 1)


def test_the_firing_loop_counts_fired_messages_by_tenant() -> None:
    first, second = (f"fl-{uuid.uuid4()}" for _ in range(2))
    f = Firing.create(tenant_metrics_top=1)
    claim = f.store.claim

    def claim_with_tenants(*args: object, **kwargs: object) -> list[ClaimedRow]:
        rows = claim(*args, **kwargs)  # type: ignore[arg-type]
        return [r._replace(tenant=first if r.id.startswith("a") else second) for r in rows]

    f.loop.store.claim = claim_with_tenants  # type: ignore[method-assign]
    ids = ["a1", "a2", "a3", "b1", "b2"]
    for i, message_id in enumerate(ids):
        assert f.store.enqueue([msg(message_id, f.at(100 + 50 * i))], 0) == [Outcome.INSERTED]
    other = _sample("chronos_tenant_fired_messages_total", tenant=OTHER)
    f.run_for(2000, step_ms=5)
    assert len(f.store) == 0
    assert _sample("chronos_tenant_fired_messages_total", tenant=first) == 3
    assert _sample("chronos_tenant_fire_lateness_seconds_count", tenant=first) == 3
    assert _sample("chronos_tenant_fired_messages_total", tenant=second) == 0  # top 1: _other
    assert _sample("chronos_tenant_fired_messages_total", tenant=OTHER) - other == 2
