"""The leader's vacuum of the messages table (``chronos.cluster.vacuum``): when it runs, and what
a role that may not vacuum, a failed vacuum and a follower do. Against Postgres:
tests/integration/test_vacuum_postgres.py."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from chronos.cluster.monitor import Monitor
from chronos.cluster.vacuum import MIN_DEAD_ROWS, Vacuum
from chronos.errors import StoreError
from chronos.testing import InMemoryStore, ManualClock
from tests.unit.helpers import settings


class DeadRows(InMemoryStore):
    """An in-memory store whose table has ``dead`` dead row versions (a vacuum clears them)."""

    def __init__(self, dead: int, *, may_vacuum: bool = True) -> None:
        super().__init__(ManualClock(datetime(2030, 1, 1, tzinfo=UTC)))
        self.dead = dead
        self.may_vacuum = may_vacuum
        self.vacuums = 0
        self.fail: StoreError | None = None

    def dead_messages(self) -> tuple[int, bool]:
        return self.dead, self.may_vacuum

    def vacuum_messages(self) -> None:
        if self.fail is not None:
            raise self.fail
        self.vacuums += 1
        self.dead = 0


def vacuumed() -> float:
    return REGISTRY.get_sample_value("chronos_vacuum_duration_seconds_count") or 0.0


def test_the_table_is_vacuumed_once_it_has_enough_dead_rows() -> None:
    store = DeadRows(MIN_DEAD_ROWS - 1)
    vacuum = Vacuum(store, 5000, lambda: True)
    before = vacuumed()
    assert vacuum.tick() is False  # an idle table is left alone
    store.dead = MIN_DEAD_ROWS
    assert vacuum.tick() is True
    assert (store.vacuums, store.dead, vacuum.runs) == (1, 0, 1)
    assert vacuumed() == before + 1
    assert vacuum.tick() is False  # nothing dead since


def test_a_role_that_may_not_vacuum_is_told_once_and_the_table_left_to_autovacuum(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DeadRows(10 * MIN_DEAD_ROWS, may_vacuum=False)
    vacuum = Vacuum(store, 5000, lambda: True, shard=2)
    with caplog.at_level(logging.WARNING, logger="chronos.cluster.vacuum"):
        assert vacuum.tick() is False
        store.may_vacuum = True  # never looked at again: the warning is not repeated
        assert vacuum.tick() is False
    warnings = [r for r in caplog.records if getattr(r, "event", "") == "vacuum_refused"]
    assert len(warnings) == 1
    assert "shard 2" in warnings[0].getMessage()
    assert "GRANT MAINTAIN" in warnings[0].getMessage()
    assert store.vacuums == 0


def test_a_failed_vacuum_is_counted_and_tried_again() -> None:
    store = DeadRows(10 * MIN_DEAD_ROWS)
    store.fail = StoreError("vacuum_messages failed: connection lost", outage=True)
    vacuum = Vacuum(store, 5000, lambda: True)
    errors = (
        REGISTRY.get_sample_value("chronos_database_errors_total", {"operation": "vacuum"}) or 0.0
    )
    assert vacuum.tick() is False
    assert (
        REGISTRY.get_sample_value("chronos_database_errors_total", {"operation": "vacuum"})
        == errors + 1
    )
    store.fail = None
    assert vacuum.tick() is True


def test_only_the_leader_vacuums_on_its_thread_every_interval() -> None:
    store = DeadRows(10 * MIN_DEAD_ROWS)
    leading = False
    vacuum = Vacuum(store, 20, lambda: leading)
    vacuum.start()
    try:
        assert vacuum._thread is not None
        time.sleep(0.2)
        assert store.vacuums == 0  # a follower never vacuums
        leading = True
        for _ in range(100):
            if store.vacuums:
                break
            time.sleep(0.05)
        assert store.vacuums == 1
    finally:
        vacuum.stop()
    assert vacuum._thread is not None and not vacuum._thread.is_alive()


def test_an_interval_of_zero_leaves_the_table_to_autovacuum() -> None:
    store = DeadRows(10 * MIN_DEAD_ROWS)
    monitor = Monitor(settings(vacuum_interval_ms=0), store)
    monitor.vacuum.start()
    assert monitor.vacuum._thread is None
    monitor.vacuum.stop()
    assert store.vacuums == 0


def test_the_monitor_vacuums_while_its_node_leads() -> None:
    store = DeadRows(10 * MIN_DEAD_ROWS)
    monitor = Monitor(settings(vacuum_interval_ms=5000), store)
    assert monitor.vacuum.leading() is False  # not elected yet
    monitor.tick(0.0)  # the only node: it leads
    assert monitor.vacuum.leading() is True
    assert monitor.vacuum.tick() is True


class SlowVacuum(DeadRows):
    """Every vacuum takes ``seconds`` and leaves the table as dead as before (a busy table)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(10 * MIN_DEAD_ROWS)
        self.seconds = seconds

    def vacuum_messages(self) -> None:
        time.sleep(self.seconds)
        self.vacuums += 1


def test_a_slow_vacuum_runs_at_most_a_tenth_of_the_time() -> None:
    """A table whose vacuum takes 50 ms is vacuumed every 0.5 s, not every 10 ms interval."""
    store = SlowVacuum(0.05)
    vacuum = Vacuum(store, 10, lambda: True)
    vacuum.start()
    try:
        time.sleep(0.9)
    finally:
        vacuum.stop()
    assert 1 <= store.vacuums <= 2  # without the bound: about 15
