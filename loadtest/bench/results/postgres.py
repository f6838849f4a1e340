"""A load's Postgres split by statement and by process kind (``loadtest.bench.pgstats``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.bench.results.jsonread import Json, json_num


@dataclass(frozen=True, slots=True)
class StatementCost:
    statement: str
    calls: int
    exec_s: float
    exec_us_per_message: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "statement": self.statement,
            "calls": self.calls,
            "exec_s": self.exec_s,
            "exec_us_per_message": self.exec_us_per_message,
        }

    @classmethod
    def from_dict(cls, data: Json) -> StatementCost:
        return cls(
            statement=str(data.get("statement", "")),
            calls=int(data.get("calls") or 0),
            exec_s=float(data.get("exec_s") or 0.0),
            exec_us_per_message=json_num(data, "exec_us_per_message"),
        )


@dataclass(frozen=True, slots=True)
class PgBreakdown:
    """A load's Postgres: its top statements by execution time and its CPU by process kind."""

    statements: list[StatementCost] = field(default_factory=list)
    cpu_by_kind_s: dict[str, float] = field(default_factory=dict)
    # Autovacuums and autoanalyzes of the table (count, seconds), parallel workers, WAL records,
    # full-page images and bytes during the load (loadtest.bench.pgstats.ACTIVITY_FIELDS).
    activity: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "statements": [s.as_dict() for s in self.statements],
            "cpu_by_kind_s": dict(self.cpu_by_kind_s),
            "activity": dict(self.activity),
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> PgBreakdown | None:
        if not data:
            return None
        kinds = data.get("cpu_by_kind_s") or {}
        return cls(
            statements=[StatementCost.from_dict(s) for s in data.get("statements") or []],
            cpu_by_kind_s={str(k): float(v) for k, v in kinds.items()},
            activity={str(k): float(v) for k, v in (data.get("activity") or {}).items()},
        )
