"""The leader keeps the history's partitions (chronos.cluster.history): on its first round it
creates today's and the next days', then once a minute; a round that cannot create or drop one is
counted, logged and tried again soon, and never raises (firing goes on)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from chronos.cluster.history import INTERVAL_S, RETRY_S, HistoryKeeper
from chronos.cluster.monitor import Monitor
from chronos.store import Maintenance
from chronos.testing import InMemoryStore
from tests.unit.admin.helpers import AdminHarness


def failures(action: str) -> float:
    labels = {"action": action}
    return REGISTRY.get_sample_value("chronos_history_maintenance_failures_total", labels) or 0


def test_the_keeper_creates_the_days_ahead_then_waits_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    keeper = HistoryKeeper(store, timedelta(days=7))
    with caplog.at_level(logging.INFO, logger="chronos.cluster.history"):
        done = keeper.tick(100.0)
    assert done is not None and len(done.created) == 3 and len(store.history_days()) == 3
    assert "kept for 7d (a change applies to the partitions created after it)" in caplog.text
    assert REGISTRY.get_sample_value("chronos_history_partitions") == 3
    assert keeper.tick(100.0 + INTERVAL_S - 1) is None  # not due yet
    assert keeper.tick(100.0 + INTERVAL_S) is not None


class FailingDrops(InMemoryStore):
    def maintain_history(self, ttl: timedelta, *, at: object = None) -> Maintenance:
        return Maintenance([], [], ["chronos_history_p20300101"], ["chronos_history_p20291201"], 2)


def test_a_partition_that_cannot_be_created_or_dropped_is_counted_and_retried_soon() -> None:
    keeper = HistoryKeeper(FailingDrops(), timedelta(days=7))
    before = failures("create"), failures("drop")
    assert keeper.tick(0.0) is not None
    assert (failures("create"), failures("drop")) == (before[0] + 1, before[1] + 1)
    assert keeper.next_at == RETRY_S


def test_a_database_error_is_counted_and_never_raised() -> None:
    store = InMemoryStore()
    keeper = HistoryKeeper(store, timedelta(days=7))
    before = failures("list")
    store.fail_next(1, "history_partitions")
    assert keeper.tick(0.0) is None
    assert failures("list") == before + 1 and keeper.next_at == RETRY_S
    assert keeper.tick(RETRY_S) is not None and len(store.history_days()) == 3


def test_only_the_leader_keeps_the_history() -> None:
    h = AdminHarness()
    monitor = Monitor(h.settings, h.store)
    monitor.tick(0.0)  # the only live node: it leads
    assert len(h.store.history_days()) == 3
    off = AdminHarness(history_ttl=timedelta(0))
    Monitor(off.settings, off.store).tick(0.0)
    assert off.store.history_days() == {}
