"""What came out, against what was sent: lost, misrouted, duplicated, early, late, dead-lettered
(``analyse`` is pure: no I/O)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from chronos.protocol import DEAD_LETTER_REASON_HEADER
from tests.support.checker.sent import TRACKING_HEADER, Expectation, Headers

TIMESTAMP_TOLERANCE_MS = 1  # CreateTime is whole milliseconds: a fire at x.9 ms reads as x


@dataclass(frozen=True)
class Observation:
    """One record read from the output or the dead-letter topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    dead_letter: bool

    @property
    def track(self) -> str | None:
        value = header(self.headers, TRACKING_HEADER)
        if value is None:
            return None
        return value.decode("utf-8", errors="replace")

    @property
    def reason(self) -> str | None:
        value = header(self.headers, DEAD_LETTER_REASON_HEADER)
        return None if value is None else value.decode("utf-8", errors="replace")


def header(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The value of the first header called ``name`` (None if absent)."""
    for n, v in headers:
        if n == name:
            return v
    return None


@dataclass(frozen=True)
class LateStats:
    """``fire time - deadline`` (ms) over the first copy of each fired message."""

    count: int = 0
    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    mean: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> LateStats:
        if not values:
            return cls()
        ordered = sorted(values)

        def pct(p: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]

        return cls(len(ordered), pct(0.5), pct(0.99), ordered[-1], sum(ordered) / len(ordered))


@dataclass
class Report:
    sent: int
    received: int  # records read (both topics, duplicates included)
    lost: list[str] = field(default_factory=list)
    misrouted: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)  # id -> copies seen (> 1)
    early: dict[str, int] = field(default_factory=dict)  # id -> ms before deadline - advance
    late: LateStats = field(default_factory=LateStats)
    dead_lettered: dict[str, str | None] = field(default_factory=dict)  # id -> reason
    unknown: int = 0  # records without a tracking id of this test
    fired_at: dict[str, int] = field(default_factory=dict)  # id -> first fire (ms, corrected)
    observations: list[Observation] = field(default_factory=list, repr=False)

    @property
    def duplicates(self) -> int:
        """Surplus copies: records beyond the first of each message."""
        return sum(count - 1 for count in self.duplicated.values())

    @property
    def ok(self) -> bool:
        """No loss, no misrouting, nothing early (duplicates are judged per scenario)."""
        return not self.lost and not self.misrouted and not self.early

    def summary(self) -> str:
        def few(items: Iterable[Any]) -> str:
            items = list(items)
            more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
            return ", ".join(map(str, items[:5])) + more

        return (
            f"sent {self.sent}, received {self.received}, lost {len(self.lost)}"
            f"{' [' + few(self.lost) + ']' if self.lost else ''}, misrouted "
            f"{len(self.misrouted)}{' [' + few(self.misrouted) + ']' if self.misrouted else ''}"
            f", duplicated {len(self.duplicated)} ids / {self.duplicates} copies, early "
            f"{len(self.early)}{' [' + few(self.early.items()) + ']' if self.early else ''}, "
            f"dead-lettered {len(self.dead_lettered)}, unknown {self.unknown}, late ms p50 "
            f"{self.late.p50:.0f} p99 {self.late.p99:.0f} max {self.late.max:.0f}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "received": self.received,
            "lost": len(self.lost),
            "misrouted": len(self.misrouted),
            "duplicated_ids": len(self.duplicated),
            "duplicates": self.duplicates,
            "early": len(self.early),
            "dead_lettered": len(self.dead_lettered),
            "unknown": self.unknown,
            "late_ms": asdict(self.late),
        }


def analyse(
    sent: Mapping[str, Expectation],
    observations: Iterable[Observation],
    *,
    advance_ms: int,
    timestamp_skew_ms: int = 0,
) -> Report:
    """Compare the records seen with the sent set (pure: no I/O).

    ``timestamp_skew_ms``: how far the producing nodes' wall clocks were ahead of true time
    (record timestamps are the producer's clock); subtracted from every timestamp.
    """
    observations = list(observations)
    copies: Counter[str] = Counter()
    seen_output: set[str] = set()
    seen_dead: set[str] = set()
    fired_at: dict[str, int] = {}
    early: dict[str, int] = {}
    dead: dict[str, str | None] = {}
    unknown = 0
    for obs in observations:
        track = obs.track
        if track is None or track not in sent:
            unknown += 1
            continue
        copies[track] += 1
        if obs.dead_letter:
            seen_dead.add(track)
            dead.setdefault(track, obs.reason)
            continue
        seen_output.add(track)
        fired = obs.timestamp_ms - timestamp_skew_ms
        fired_at[track] = min(fired, fired_at.get(track, fired))
        deadline = sent[track].deadline_ms
        if deadline is not None:
            ahead = (deadline - advance_ms) - fired
            if ahead > TIMESTAMP_TOLERANCE_MS:
                early[track] = max(ahead, early.get(track, 0))
    lost, misrouted = [], []
    for track, expectation in sent.items():
        if track not in seen_output and track not in seen_dead:
            lost.append(track)
        elif (expectation.dead_letter and track in seen_output) or (
            not expectation.dead_letter and track not in seen_output
        ):
            misrouted.append(track)
    lateness = [
        fired_at[t] - d
        for t in fired_at
        if (d := sent[t].deadline_ms) is not None and not sent[t].dead_letter
    ]
    return Report(
        sent=len(sent),
        received=len(observations),
        lost=sorted(lost),
        misrouted=sorted(misrouted),
        duplicated={t: n for t, n in copies.items() if n > 1},
        early=early,
        late=LateStats.of(lateness),
        dead_lettered=dead,
        unknown=unknown,
        fired_at=fired_at,
        observations=observations,
    )
