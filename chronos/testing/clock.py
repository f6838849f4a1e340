"""``ManualClock``: one time line, wall and monotonic, that only moves when a test says so."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class ManualClock:
    """A wall clock and a monotonic clock that advance together, only when told to.

    Time is kept in whole microseconds (the database's resolution), so many small steps add up
    exactly.
    """

    def __init__(self, start: datetime | None = None, monotonic_start: float = 1000.0):
        self._start = start if start is not None else datetime(2030, 1, 1, tzinfo=UTC)
        if self._start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._mono_start_us = round(monotonic_start * 1_000_000)
        self._elapsed_us = 0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._start + timedelta(microseconds=self._elapsed_us)

    def monotonic(self) -> float:
        with self._lock:
            return (self._mono_start_us + self._elapsed_us) / 1_000_000

    def advance(self, ms: float) -> None:
        if ms < 0:
            raise ValueError("time only moves forward")
        with self._lock:
            self._elapsed_us += round(ms * 1000)

    def __call__(self) -> datetime:
        return self.now()
