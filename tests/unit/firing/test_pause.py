"""Pauses in the firing loop: the claims skip a paused tenant or topic, a message of it claimed
ahead is given back (not fired) within the pause refresh, other tenants fire as before, a
resume lets the paused messages fire, and what expires while paused is dead-lettered."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from chronos.observability import metrics
from chronos.observability.dependencies import FLOW_CONTROL
from chronos.protocol import ScheduledMessage
from chronos.store import PauseKind
from tests.unit.helpers import OUTPUT, Firing

DLT = "chronos-dlt"


def _msg(
    message_id: str,
    firing: Firing,
    due_ms: float,
    tenant: str = "",
    topic: str | None = None,
    expires_ms: int | None = None,
) -> ScheduledMessage:
    deadline = firing.clock.now() + timedelta(milliseconds=due_ms)
    return ScheduledMessage(
        message_id,
        deadline,
        message_id.encode(),
        b"v",
        [],
        target_topic=topic,
        tenant=tenant,
        expires_ms=expires_ms,
    )


def _fired(firing: Firing) -> set[bytes | None]:
    return {r.key for r in firing.publisher.records if r.topic != DLT}


def test_a_paused_tenant_waits_and_fires_on_resume_while_others_fire() -> None:
    firing = Firing.create(dead_letter_topic=DLT)
    firing.store.pause(PauseKind.TENANT, "acme", "ops")
    firing.store.enqueue([_msg("a1", firing, 200, "acme"), _msg("o1", firing, 200, "other")], 0)
    firing.run_for(2000, step_ms=5)
    assert _fired(firing) == {b"o1"}
    assert "a1" in firing.store  # still waiting
    firing.store.resume(PauseKind.TENANT, "acme")
    firing.run_for(1500, step_ms=5)
    assert _fired(firing) == {b"o1", b"a1"}


def test_a_resume_frees_the_overdue_messages_at_once_not_at_the_next_second() -> None:
    """While something is paused the pause set is read every RESUME_REFRESH_S: a resume just
    after a read (a second before the next, at PAUSE_REFRESH_S) fires within a poll or two."""
    firing = Firing.create(dead_letter_topic=DLT)
    firing.store.pause(PauseKind.TENANT, "acme", "ops")
    firing.store.enqueue([_msg("a1", firing, 200, "acme")], 0)
    firing.run_for(2020, step_ms=5)  # the pause set read at 0, 1000 and 2000 ms
    assert _fired(firing) == set()
    firing.store.resume(PauseKind.TENANT, "acme")
    firing.run_for(250, step_ms=5)  # RESUME_REFRESH_S and a claim, not PAUSE_REFRESH_S
    assert _fired(firing) == {b"a1"}


def test_a_message_claimed_ahead_is_given_back_when_its_topic_is_paused() -> None:
    firing = Firing.create(
        dead_letter_topic=DLT, lookahead_ms=3000, hold_time_ms=10_000, delivery_timeout_ms=3000
    )
    firing.store.enqueue([_msg("t1", firing, 2500, topic="t"), _msg("o1", firing, 2500)], 0)
    firing.run_for(300, step_ms=5)
    assert {r.id for r in firing.store.claimed()} == {"t1", "o1"}  # claimed ahead
    firing.store.pause(PauseKind.TOPIC, "t", "ops")
    firing.run_for(1100, step_ms=5)  # within the pause refresh
    assert {r.id for r in firing.store.claimed()} == {"o1"}
    firing.run_for(2000, step_ms=5)
    assert _fired(firing) == {b"o1"}
    assert "t1" in firing.store


def test_pausing_the_output_topic_pauses_the_messages_that_name_no_topic() -> None:
    firing = Firing.create(dead_letter_topic=DLT)
    firing.store.pause(PauseKind.TOPIC, OUTPUT, "ops")
    firing.store.enqueue([_msg("n1", firing, 200), _msg("t1", firing, 200, topic="t")], 0)
    firing.run_for(1500, step_ms=5)
    assert _fired(firing) == {b"t1"}


def test_what_expires_while_paused_is_dead_lettered_as_expired() -> None:
    firing = Firing.create(dead_letter_topic=DLT)
    firing.store.pause(PauseKind.TENANT, "acme", "ops")
    firing.store.enqueue(
        [_msg("x1", firing, 200, "acme", expires_ms=1000), _msg("w1", firing, 200, "acme")], 0
    )
    firing.run_for(3000, step_ms=5)
    dead = [r for r in firing.publisher.records if r.topic == DLT]
    assert [r.key for r in dead] == [b"x1"]
    assert _fired(firing) == set()
    assert "w1" in firing.store


def test_the_paused_gauge_has_one_series_per_pause() -> None:
    firing = Firing.create()
    pause = firing.store.pause(PauseKind.TENANT, "gauged", "ops")
    firing.run_for(50, step_ms=5)
    since = metrics.PAUSED_SINCE.labels("tenant", "gauged")._value.get()
    assert since == pause.paused_at.timestamp()
    firing.store.resume(PauseKind.TENANT, "gauged")
    firing.run_for(1100, step_ms=5)
    names = {s.labels.get("name") for m in metrics.PAUSED_SINCE.collect() for s in m.samples}
    assert "gauged" not in names


def test_a_node_that_cannot_read_the_pauses_claims_nothing_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A role without the grant on chronos_pauses: not a Postgres outage, so nothing else
    stops the claims. The node claims nothing (it cannot know what is paused), warns, and its
    flow-control dependency is down (readiness) until a read succeeds."""
    FLOW_CONTROL.reset()
    firing = Firing.create()
    firing.store.pause(PauseKind.TENANT, "acme", "ops")
    firing.store.enqueue([_msg("paused", firing, 50, tenant="acme")], 0)
    refused = "list_pauses failed: permission denied for table chronos_pauses"
    firing.store.fail_next(150, operation="list_pauses", message=refused)
    with caplog.at_level(logging.WARNING):
        firing.run_for(1_000, step_ms=10)  # one read a step, each refused
    assert firing.publisher.records == []  # the paused message never fired
    assert firing.store.statements.count("claim_due") == 0
    assert FLOW_CONTROL.down
    assert any(getattr(r, "dependency", "") == "flow_control" for r in caplog.records)
    firing.run_for(2_000, step_ms=10)  # the reads succeed again: claims resume, paused skipped
    assert not FLOW_CONTROL.down
    assert firing.store.statements.count("claim_due") > 0
    assert firing.publisher.records == []
    FLOW_CONTROL.reset()


def test_a_node_that_cannot_read_the_limits_claims_nothing() -> None:
    FLOW_CONTROL.reset()
    firing = Firing.create()
    firing.store.set_limit(PauseKind.TENANT, "acme", 1, "ops")
    firing.store.enqueue([_msg(f"a{i}", firing, 50, tenant="acme") for i in range(20)], 0)
    firing.store.fail_next(1_000, operation="list_limits", message="permission denied")
    firing.run_for(2_000, step_ms=10)
    assert firing.publisher.records == []
    assert FLOW_CONTROL.down
    FLOW_CONTROL.reset()
