"""Wall-clock helpers: epoch milliseconds, Chronos deadline formatting and duration parsing."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime, timedelta

_DURATION_RE = re.compile(r"^\s*(?P<num>[0-9]*\.?[0-9]+)\s*(?P<unit>ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0, None: 1000.0}


class DurationError(ValueError):
    """A duration string that cannot be parsed."""


def now_ms() -> int:
    """Milliseconds since the Unix epoch (wall clock)."""
    return time.time_ns() // 1_000_000


def parse_duration_ms(text: str) -> int:
    """Parse ``500ms``, ``3s``, ``1.5s``, ``2m``, ``1h`` or a bare number of seconds into ms.

    The result is rounded to the nearest millisecond; negative values are impossible by syntax.
    """
    match = _DURATION_RE.match(text)
    if match is None:
        raise DurationError(
            f"invalid duration {text!r}: expected a non-negative number with an optional unit "
            "ms, s, m or h (a bare number means seconds), e.g. 500ms, 3s, 1.5m"
        )
    value = float(match.group("num")) * _UNIT_MS[match.group("unit")]
    if not math.isfinite(value):
        raise DurationError(f"invalid duration {text!r}: not finite")
    return round(value)


def format_ms(ms: int) -> str:
    """Epoch milliseconds as Chronos deadline text, e.g. ``2022-12-01T11:09:01.123Z``."""
    seconds, millis = divmod(ms, 1000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{millis:03d}Z"


class DeadlineFormatter:
    """``format_ms`` with the per-second prefix cached: cheap enough to call per message."""

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(self, ms: int) -> str:
        seconds, millis = divmod(ms, 1000)
        if seconds != self._second:
            self._second = seconds
            self._prefix = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        return f"{self._prefix}{millis:03d}Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_instant_ms(text: str | bytes) -> int:
    """Epoch milliseconds of an ISO-8601 instant as Chronos writes them (``…Z``, an offset, or
    none: UTC), e.g. the scheduled instant a node relays beside a fired record."""
    if isinstance(text, bytes):
        text = text.decode("ascii")
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // timedelta(milliseconds=1)


def iso_utc(ms: int) -> str:
    """Human-readable UTC instant for run metadata."""
    return format_ms(ms)
