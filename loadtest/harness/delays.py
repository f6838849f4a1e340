"""Delay distributions: how far in the future each message's deadline lies.

Specs (durations take ``ms``, ``s``, ``m`` or ``h``; a bare number means seconds):

* ``fixed:3s``         every deadline is exactly 3 s after the message is sent;
* ``uniform:3s-10s``   uniformly distributed (whole milliseconds, both ends included);
* ``burst:20s``        every message is due at one instant, 20 s after the run starts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from loadtest.harness.timeutil import DurationError, parse_duration_ms


class DelaySpecError(ValueError):
    """A delay spec that cannot be parsed."""


class DelaySpec(Protocol):
    kind: str

    def deadline_ms(self, sent_ms: int, start_ms: int, rng: random.Random) -> int:
        """The deadline of a message sent at ``sent_ms`` in a run that started at ``start_ms``."""
        ...

    def describe(self) -> str:
        """The canonical spec text (parses back to an equal spec)."""
        ...


def _ms_text(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True, slots=True)
class FixedDelay:
    delay_ms: int
    kind: str = "fixed"

    def deadline_ms(self, sent_ms: int, start_ms: int, rng: random.Random) -> int:
        return sent_ms + self.delay_ms

    def describe(self) -> str:
        return f"fixed:{_ms_text(self.delay_ms)}"


@dataclass(frozen=True, slots=True)
class UniformDelay:
    low_ms: int
    high_ms: int
    kind: str = "uniform"

    def deadline_ms(self, sent_ms: int, start_ms: int, rng: random.Random) -> int:
        span = self.high_ms - self.low_ms + 1
        return sent_ms + self.low_ms + int(rng.random() * span)

    def describe(self) -> str:
        return f"uniform:{_ms_text(self.low_ms)}-{_ms_text(self.high_ms)}"


@dataclass(frozen=True, slots=True)
class BurstDelay:
    at_ms: int
    kind: str = "burst"

    def deadline_ms(self, sent_ms: int, start_ms: int, rng: random.Random) -> int:
        return start_ms + self.at_ms

    def describe(self) -> str:
        return f"burst:{_ms_text(self.at_ms)}"


_USAGE = "expected fixed:<d>, uniform:<min>-<max> or burst:<at>, e.g. fixed:3s, uniform:3s-10s"


def _duration(spec: str, text: str) -> int:
    try:
        return parse_duration_ms(text)
    except DurationError as exc:
        raise DelaySpecError(f"delay spec {spec!r}: {exc}") from None


def parse_delay(spec: str) -> FixedDelay | UniformDelay | BurstDelay:
    """Parse a delay spec; raises ``DelaySpecError`` with a message fit for the command line."""
    kind, sep, arg = spec.strip().partition(":")
    kind = kind.strip().lower()
    if not sep or not arg.strip():
        raise DelaySpecError(f"delay spec {spec!r}: missing ':<value>'; {_USAGE}")
    if kind == "fixed":
        return FixedDelay(_duration(spec, arg))
    if kind == "burst":
        return BurstDelay(_duration(spec, arg))
    if kind == "uniform":
        low_text, dash, high_text = arg.partition("-")
        if not dash or not low_text.strip() or not high_text.strip():
            raise DelaySpecError(f"delay spec {spec!r}: uniform needs <min>-<max>, e.g. 3s-10s")
        low, high = _duration(spec, low_text), _duration(spec, high_text)
        if low > high:
            raise DelaySpecError(f"delay spec {spec!r}: minimum {low} ms exceeds maximum {high} ms")
        return UniformDelay(low, high)
    raise DelaySpecError(f"delay spec {spec!r}: unknown kind {kind!r}; {_USAGE}")
