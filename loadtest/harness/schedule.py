"""Open-loop pacing by absolute time slots.

Message ``i`` is due at ``start + i / rate``: slot times are computed from the start, never
accumulated, so the offered rate does not drift when the sender is slow. A sender that falls behind
sends the overdue slots back to back (bounded batches) until it has caught up, and every slot sent
more than ``threshold`` after its time is counted as *behind*, grouped into episodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class Slots(Protocol):
    """Absolute send times of ``total`` slots: what ``pace`` follows."""

    @property
    def start(self) -> float: ...

    @property
    def total(self) -> int: ...

    def slot_time(self, index: int) -> float: ...

    def due(self, now: float) -> int: ...


@dataclass(frozen=True, slots=True)
class RateSchedule:
    rate: float  # messages per second
    start: float  # clock value (seconds) of slot 0
    total: int  # number of slots

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a positive number, got {self.rate!r}")
        if self.total < 0:
            raise ValueError(f"total must be >= 0, got {self.total}")

    def slot_time(self, index: int) -> float:
        return self.start + index / self.rate

    def due(self, now: float) -> int:
        """How many slots are due at ``now`` (slots ``0 .. due-1``), capped at ``total``."""
        if now < self.start:
            return 0
        # A tiny epsilon so that a clock reading exactly on a slot boundary counts that slot.
        return min(self.total, math.floor((now - self.start) * self.rate + 1e-9) + 1)


@dataclass(slots=True)
class BehindEpisode:
    first_slot: int
    last_slot: int
    start_offset_s: float  # seconds after the schedule start when the episode began
    end_offset_s: float
    max_lag_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "first_slot": self.first_slot,
            "last_slot": self.last_slot,
            "start_offset_s": round(self.start_offset_s, 3),
            "end_offset_s": round(self.end_offset_s, 3),
            "max_lag_ms": round(self.max_lag_ms, 3),
        }


@dataclass(slots=True)
class LagTracker:
    """Records how late slots were sent; ``threshold_s`` separates jitter from falling behind."""

    threshold_s: float
    start: float
    max_episodes: int = 1000
    max_lag_s: float = 0.0
    behind_slots: int = 0
    episodes: list[BehindEpisode] = field(default_factory=list)
    dropped_episodes: int = 0
    _open: BehindEpisode | None = None

    def observe(
        self, first: int, last: int, lag_first_s: float, lag_last_s: float, now: float
    ) -> None:
        """Slots ``first..last`` (inclusive) were sent at ``now``; lags are of the first and last.

        The first slot of a batch is always the latest, so its lag is the batch maximum.
        """
        if lag_first_s > self.max_lag_s:
            self.max_lag_s = lag_first_s
        if lag_first_s <= self.threshold_s:
            self._close()
            return
        if lag_last_s > self.threshold_s:
            behind_last = last
        else:  # slot lags fall linearly across the batch; count only those over the threshold
            span = last - first
            frac = (lag_first_s - self.threshold_s) / max(lag_first_s - lag_last_s, 1e-12)
            behind_last = first + min(span, int(frac * span))
        self.behind_slots += behind_last - first + 1
        offset = now - self.start
        if self._open is None:
            self._open = BehindEpisode(first, behind_last, offset, offset, lag_first_s * 1000)
        else:
            self._open.last_slot = behind_last
            self._open.end_offset_s = offset
            self._open.max_lag_ms = max(self._open.max_lag_ms, lag_first_s * 1000)
        if behind_last < last:
            self._close()

    def _close(self) -> None:
        if self._open is None:
            return
        if len(self.episodes) < self.max_episodes:
            self.episodes.append(self._open)
        else:
            self.dropped_episodes += 1
        self._open = None

    def finish(self) -> None:
        self._close()


@dataclass(frozen=True, slots=True)
class PacingResult:
    sent: int
    elapsed_s: float
    stopped: bool


def pace(
    schedule: Slots,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    emit: Callable[[int, int], None],
    tracker: LagTracker,
    *,
    max_batch: int = 1000,
    max_sleep_s: float = 0.005,
    min_sleep_s: float = 0.001,
    idle: Callable[[], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> PacingResult:
    """Drive ``emit(first, end)`` (slots ``first .. end-1``) following the absolute schedule.

    Slots are sent at most ``min_sleep_s`` (plus scheduler noise) after their time.

    ``idle`` is called whenever the sender has caught up (e.g. to serve producer callbacks).
    """
    sent = 0
    stopped = False
    while sent < schedule.total:
        if should_stop is not None and should_stop():
            stopped = True
            break
        now = clock()
        due = schedule.due(now)
        if due <= sent:
            if idle is not None:
                idle()
            wait = schedule.slot_time(sent) - clock()
            if wait > 0:
                # Waking per slot at high rates costs CPU for nothing: the producer batches
                # anyway (linger.ms), so sleep at least ``min_sleep_s`` and send what is due.
                sleep(min(max(wait, min_sleep_s), max_sleep_s))
            continue
        end = min(due, sent + max_batch)
        tracker.observe(
            sent, end - 1, now - schedule.slot_time(sent), now - schedule.slot_time(end - 1), now
        )
        emit(sent, end)
        sent = end
    tracker.finish()
    return PacingResult(sent, clock() - schedule.start, stopped)
