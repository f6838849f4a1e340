"""What a scenario's load did: the steady rates, the backlog verdict, a burst's drain and intake,
the pre-load, and the holes in the recorded output offsets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.bench.results.jsonread import Json, json_int, json_map, json_num


@dataclass(frozen=True, slots=True)
class SteadyRates:
    """Mean rates over the steady window (whole seconds since the start of sending)."""

    window_s: tuple[int, int] | None = None
    seconds: int | None = None
    sent_per_s: float | None = None
    due_per_s: float | None = None
    fired_per_s: float | None = None
    fired_to_due: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_s": None if self.window_s is None else list(self.window_s),
            "seconds": self.seconds,
            "sent_per_s": self.sent_per_s,
            "due_per_s": self.due_per_s,
            "fired_per_s": self.fired_per_s,
            "fired_to_due": self.fired_to_due,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> SteadyRates | None:
        if not data:
            return None
        window = data.get("window_s")
        return cls(
            window_s=(int(window[0]), int(window[1])) if window else None,
            seconds=json_int(data, "seconds"),
            sent_per_s=json_num(data, "sent_per_s"),
            due_per_s=json_num(data, "due_per_s"),
            fired_per_s=json_num(data, "fired_per_s"),
            fired_to_due=json_num(data, "fired_to_due"),
        )


@dataclass(frozen=True, slots=True)
class Check:
    """One backlog check: ``value <= limit``."""

    value: float
    limit: float
    ok: bool

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "limit": self.limit, "ok": self.ok}


@dataclass(frozen=True, slots=True)
class BacklogVerdict:
    """Whether the backlog grew while sending (None: no check had data)."""

    growing: bool | None
    expected_rows: int | None = None
    rows_at_send_end: int | None = None
    max_rows: int | None = None
    max_overdue: int | None = None
    checks: dict[str, Check] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected_rows": self.expected_rows,
            "rows_at_send_end": self.rows_at_send_end,
            "max_rows": self.max_rows,
            "max_overdue": self.max_overdue,
            "checks": {name: c.as_dict() for name, c in self.checks.items()},
            "growing": self.growing,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> BacklogVerdict | None:
        if not data:
            return None
        growing = data.get("growing")
        return cls(
            growing=growing if isinstance(growing, bool) else None,
            expected_rows=json_int(data, "expected_rows"),
            rows_at_send_end=json_int(data, "rows_at_send_end"),
            max_rows=json_int(data, "max_rows"),
            max_overdue=json_int(data, "max_overdue"),
            checks={
                name: Check(c["value"], c["limit"], bool(c["ok"]))
                for name, c in json_map(data, "checks").items()
            },
        )


@dataclass(frozen=True, slots=True)
class Drain:
    """A burst: every message fired, from the first fire to the last."""

    count: int | None = None
    first_fired_ms: int | None = None
    last_fired_ms: int | None = None
    seconds: float | None = None
    rate_per_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "first_fired_ms": self.first_fired_ms,
            "last_fired_ms": self.last_fired_ms,
            "seconds": self.seconds,
            "rate_per_s": self.rate_per_s,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> Drain | None:
        if not data:
            return None
        return cls(
            count=json_int(data, "count"),
            first_fired_ms=json_int(data, "first_fired_ms"),
            last_fired_ms=json_int(data, "last_fired_ms"),
            seconds=json_num(data, "seconds"),
            rate_per_s=json_num(data, "rate_per_s"),
        )


@dataclass(frozen=True, slots=True)
class Intake:
    """A burst: when (nearly) all its messages were stored, seconds after the first send."""

    stored_after_s: float | None = None
    rate_per_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"stored_after_s": self.stored_after_s, "rate_per_s": self.rate_per_s}

    @classmethod
    def from_dict(cls, data: Json | None) -> Intake:
        data = data or {}
        return cls(json_num(data, "stored_after_s"), json_num(data, "rate_per_s"))


@dataclass(frozen=True, slots=True)
class Preload:
    rows: int | None = None
    insert_s: float | None = None
    seconds: float | None = None
    table_mb: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "insert_s": self.insert_s,
            "seconds": self.seconds,
            "table_mb": self.table_mb,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> Preload:
        data = data or {}
        return cls(
            json_int(data, "rows"),
            json_num(data, "insert_s"),
            json_num(data, "seconds"),
            json_num(data, "table_mb"),
        )


@dataclass(frozen=True, slots=True)
class OffsetGap:
    topic: str
    partition: int
    first: int
    last: int
    count: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "first": self.first,
            "last": self.last,
            "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class OffsetGaps:
    """Holes in the recorded output offsets (``gaps``: the first ones only)."""

    missing: int
    gaps: list[OffsetGap]
    gap_count: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "missing": self.missing,
            "gaps": [g.as_dict() for g in self.gaps],
            "gap_count": self.gap_count,
        }
