"""The rate-limit gauge of a limit cleared before this node ever claimed under it: its series was
never created, and removing it must not end the firing loop (prometheus_client before 0.22,
which pyproject allows, raises KeyError from ``remove`` for it)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chronos.observability import metrics
from chronos.protocol import ScheduledMessage
from chronos.store import PAUSE_REFRESH_S, PauseKind
from tests.support.metrics import remove_as_before_0_22
from tests.unit.helpers import OUTPUT, Firing


def test_a_limit_cleared_before_any_claim_under_it_leaves_the_firing_loop_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    family = metrics.RATE_LIMITED
    monkeypatch.setattr(family, "remove", remove_as_before_0_22(family))
    f = Firing.create()
    f.store.set_limit(PauseKind.TOPIC, "limited-while-claims-failed", 10, "ops")
    f.store.fail_next(1, operation="claim_due")  # the database away: no claim sets the gauge
    f.tick()  # the limit read, the claim failed
    f.store.clear_limit(PauseKind.TOPIC, "limited-while-claims-failed")
    f.clock.advance(PAUSE_REFRESH_S * 1000 + 10)
    deadline = f.clock.now() + timedelta(milliseconds=100)
    f.store.enqueue([ScheduledMessage("after", deadline, b"k", b"v", [])], 0)
    f.run_for(6_000, step_ms=10)  # the limits read again: this one is gone
    assert [r.topic for r in f.publisher.delivered(OUTPUT)] == [OUTPUT]
