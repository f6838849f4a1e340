"""What the nodes did: statement latencies and counters from ``/metrics``, stalls, py-spy
profiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.bench.results.jsonread import Json, json_int, json_map, json_num, json_str


@dataclass(frozen=True, slots=True)
class StatementStats:
    """Observations of a node histogram between two scrapes, in ms.

    Written with the keys ``bench.json`` holds: without ``p99_9_ms`` when the histogram was not
    exposed (``observed`` False), ``per_s`` only when measured over a known time, and the rows
    per statement under ``rows_key`` (``rows_per_statement``, or ``rows_per_claim`` for the
    claim) only when the node exposed its batch sizes.
    """

    count: int | None = None
    mean_ms: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p99_9_ms: float | None = None
    per_s: float | None = None
    rows: float | None = None
    rows_key: str | None = None
    observed: bool = True

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "count": self.count,
            "mean_ms": self.mean_ms,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }
        if self.observed:
            out["p99_9_ms"] = self.p99_9_ms
        if self.per_s is not None:
            out["per_s"] = self.per_s
        if self.rows_key is not None:
            out[self.rows_key] = self.rows
        return out

    @classmethod
    def from_dict(cls, data: Json | None) -> StatementStats:
        data = data or {}
        key = next((k for k in ("rows_per_claim", "rows_per_statement") if k in data), None)
        return cls(
            count=json_int(data, "count"),
            mean_ms=json_num(data, "mean_ms"),
            p50_ms=json_num(data, "p50_ms"),
            p99_ms=json_num(data, "p99_ms"),
            p99_9_ms=json_num(data, "p99_9_ms"),
            per_s=json_num(data, "per_s"),
            rows=None if key is None else json_num(data, key),
            rows_key=key,
            observed="p99_9_ms" in data,
        )


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    """What the nodes did between two scrapes of every node."""

    statements: dict[str, StatementStats]
    claim: StatementStats
    counters: dict[str, int | None]
    node_lateness: StatementStats

    def statements_dict(self) -> dict[str, dict[str, Any]]:
        return {name: s.as_dict() for name, s in self.statements.items()}


@dataclass(frozen=True, slots=True)
class Stall:
    """A node that fired nothing while rows were overdue; its stacks are in ``file``."""

    node: int
    t_ms: int
    overdue: int | None
    file: str

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "t_ms": self.t_ms, "overdue": self.overdue, "file": self.file}

    @classmethod
    def from_dict(cls, data: Json) -> Stall:
        return cls(
            int(data["node"]), int(data["t_ms"]), json_int(data, "overdue"), str(data["file"])
        )


@dataclass(frozen=True, slots=True)
class RankedFunction:
    function: str
    samples: int
    percent: float

    def as_dict(self) -> dict[str, Any]:
        return {"function": self.function, "samples": self.samples, "percent": self.percent}


@dataclass(frozen=True, slots=True)
class Profile:
    """A node's py-spy profile: functions ranked by self and total samples."""

    samples: int
    self: list[RankedFunction] = field(default_factory=list)
    total: list[RankedFunction] = field(default_factory=list)
    threads: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        ranked = {
            "self": [f.as_dict() for f in self.self],
            "total": [f.as_dict() for f in self.total],
        }
        if self.error is not None:
            return {"error": self.error, "samples": self.samples, **ranked}
        return {"samples": self.samples, "threads": dict(self.threads), **ranked}

    @classmethod
    def from_dict(cls, data: Json | None) -> Profile | None:
        if not data:
            return None

        def ranked(key: str) -> list[RankedFunction]:
            return [
                RankedFunction(str(i["function"]), int(i["samples"]), i["percent"])
                for i in data.get(key) or []
            ]

        return cls(
            samples=int(data.get("samples") or 0),
            self=ranked("self"),
            total=ranked("total"),
            threads=dict(json_map(data, "threads")),
            error=json_str(data, "error"),
        )
