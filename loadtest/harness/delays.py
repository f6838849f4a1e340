"""Delay distributions: how far in the future each message's deadline lies.

Specs (durations take ``ms``, ``s``, ``m`` or ``h``; a bare number means seconds):

* ``fixed:3s``         every deadline is exactly 3 s after the message is sent;
* ``uniform:3s-10s``   uniformly distributed (whole milliseconds, both ends included);
* ``burst:20s``        every message is due at one instant, 20 s after the run starts;
* ``mix:70%1s-60s,20%1m-10m,10%10m-1h``  a mixture: each message picks a part with its share
  (the shares are weights: they need not add up to 100) and is due uniformly within it (the
  soak's delays, seconds to hours: ``loadtest.soak.load``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class MixDelay:
    """Each message picks part ``i`` with probability ``weights[i] / sum(weights)``, then a
    delay uniformly in that part's range (whole milliseconds, both ends included)."""

    parts: tuple[tuple[float, UniformDelay], ...]
    kind: str = "mix"
    edges: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.parts or any(w <= 0 for w, _ in self.parts):
            raise ValueError("a mix needs parts with positive shares")
        total = sum(w for w, _ in self.parts)
        edges, acc = [], 0.0
        for weight, _ in self.parts:
            acc += weight / total
            edges.append(acc)
        object.__setattr__(self, "edges", tuple(edges))

    def deadline_ms(self, sent_ms: int, start_ms: int, rng: random.Random) -> int:
        pick = rng.random()
        for edge, (_, part) in zip(self.edges, self.parts, strict=True):
            if pick < edge:
                return part.deadline_ms(sent_ms, start_ms, rng)
        return self.parts[-1][1].deadline_ms(sent_ms, start_ms, rng)

    def mean_ms(self) -> float:
        """The mean delay (what the standing backlog is, by Little's law, times the rate)."""
        total = sum(w for w, _ in self.parts)
        return sum(w / total * (p.low_ms + p.high_ms) / 2 for w, p in self.parts)

    @property
    def high_ms(self) -> int:
        return max(p.high_ms for _, p in self.parts)

    def describe(self) -> str:
        return "mix:" + ",".join(
            f"{_share_text(w)}%{p.describe().removeprefix('uniform:')}" for w, p in self.parts
        )


def _share_text(weight: float) -> str:
    return str(int(weight)) if float(weight).is_integer() else f"{weight:g}"


_USAGE = (
    "expected fixed:<d>, uniform:<min>-<max>, burst:<at> or mix:<share>%<min>-<max>,..., e.g. "
    "fixed:3s, uniform:3s-10s, mix:70%1s-60s,30%1m-10m"
)


def _duration(spec: str, text: str) -> int:
    try:
        return parse_duration_ms(text)
    except DurationError as exc:
        raise DelaySpecError(f"delay spec {spec!r}: {exc}") from None


def _uniform(spec: str, arg: str) -> UniformDelay:
    low_text, dash, high_text = arg.partition("-")
    if not dash or not low_text.strip() or not high_text.strip():
        raise DelaySpecError(f"delay spec {spec!r}: uniform needs <min>-<max>, e.g. 3s-10s")
    low, high = _duration(spec, low_text), _duration(spec, high_text)
    if low > high:
        raise DelaySpecError(f"delay spec {spec!r}: minimum {low} ms exceeds maximum {high} ms")
    return UniformDelay(low, high)


def _mix(spec: str, arg: str) -> MixDelay:
    parts: list[tuple[float, UniformDelay]] = []
    for item in arg.split(","):
        share, pct, span = item.partition("%")
        try:
            weight = float(share)
        except ValueError:
            weight = -1.0
        if not pct or not weight > 0:
            raise DelaySpecError(
                f"delay spec {spec!r}: each part of a mix is <share>%<min>-<max> with a "
                f"positive share, e.g. 70%1s-60s; got {item!r}"
            )
        parts.append((weight, _uniform(spec, span)))
    return MixDelay(tuple(parts))


Delay = FixedDelay | UniformDelay | BurstDelay | MixDelay


def parse_delay(spec: str) -> Delay:
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
        return _uniform(spec, arg)
    if kind == "mix":
        return _mix(spec, arg)
    raise DelaySpecError(f"delay spec {spec!r}: unknown kind {kind!r}; {_USAGE}")
