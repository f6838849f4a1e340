"""One log line per outage state change, a reminder a minute, and the dependency gauge."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY

from chronos.observability.dependencies import REMINDER_S, Dependency
from chronos.observability.logs import Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gauge(label: str) -> float | None:
    return REGISTRY.get_sample_value("chronos_dependency_up", {"dependency": label})


def events(caplog: pytest.LogCaptureFixture, level: int = logging.INFO) -> list[str]:
    return [str(getattr(r, "event", "")) for r in caplog.records if r.levelno >= level]


def test_an_outage_logs_once_then_a_reminder_a_minute_then_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    dep = Dependency("Postgres", "test-pg", clock)
    caplog.set_level(logging.DEBUG)
    dep.succeeded()
    assert gauge("test-pg") == 1
    assert events(caplog) == []  # the first contact is not news
    for _ in range(241):  # two minutes of failures, two a second
        dep.failed(ConnectionError("connection refused\nsecond line"))
        clock.now += 0.5
    assert gauge("test-pg") == 0
    assert events(caplog, logging.WARNING) == [
        "dependency_down",
        "dependency_still_down",
        "dependency_still_down",
    ]
    down = next(r for r in caplog.records if getattr(r, "event", "") == "dependency_down")
    assert "connection refused" in down.getMessage()
    assert "second line" not in down.getMessage()
    dep.succeeded()
    dep.succeeded()
    assert gauge("test-pg") == 1
    assert events(caplog).count("dependency_up") == 1
    up = next(r for r in caplog.records if getattr(r, "event", "") == "dependency_up")
    assert "120.5 s" in up.getMessage() and "241 failed" in up.getMessage()
    assert REMINDER_S == 60.0


def test_a_quiet_dependency_tracks_its_state_without_logging_or_exporting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dep = Dependency("Kafka", "test-quiet", Clock())
    dep.announce = False
    caplog.set_level(logging.INFO)
    dep.failed("all brokers down")
    assert dep.down
    dep.succeeded()
    assert not dep.down
    assert events(caplog) == []
    assert gauge("test-quiet") is None


def test_a_throttle_lets_one_line_a_period_through() -> None:
    clock = Clock()
    throttle = Throttle(every=60, clock=clock)
    levels = []
    for _ in range(130):
        levels.append(throttle.level())
        clock.now += 1
    assert levels.count(logging.WARNING) == 3  # at 0, 60 and 120 s
    assert levels.count(logging.DEBUG) == 127


def test_the_client_library_s_repeated_warnings_pass_once_a_minute_per_kind() -> None:
    from chronos.observability.logs import ThrottleFilter

    clock = Clock()
    flt = ThrottleFilter(every=60, clock=clock)

    def record(message: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.makeLogRecord({"msg": message, "levelno": level})

    assert flt.filter(record("REQTMOUT [producer-1] timed out"))
    assert not flt.filter(record("REQTMOUT [producer-2] timed out"))  # same kind, same minute
    assert flt.filter(record("FAIL [consumer-1] connection refused"))  # another kind
    assert flt.filter(record("REQTMOUT info", logging.INFO))  # below WARNING: untouched
    clock.now += 60
    assert flt.filter(record("REQTMOUT [producer-1] timed out"))
