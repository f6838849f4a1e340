"""The figures the benchmark computes, as types.

Each is written into a scenario's record in ``bench.json`` with ``as_dict`` (the keys
``bench.json`` has always had) and read back with ``from_dict``, where a figure an older or a
failed run lacks is None. ``loadtest.bench.records`` reads whole records back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Json = Mapping[str, Any]


def json_map(data: Json | None, key: str) -> Json:
    """``data[key]`` when it is an object, else an empty one."""
    value = None if data is None else data.get(key)
    return value if isinstance(value, Mapping) else {}


def json_num(data: Json, key: str) -> float | None:
    """A number as JSON had it (an int stays an int: the report prints ``4`` and ``4.0``
    differently), None when missing."""
    value = data.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def json_int(data: Json, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def json_str(data: Json, key: str) -> str | None:
    value = data.get(key)
    return None if value is None else str(value)


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
class StatementStats:
    """Observations of a node histogram between two scrapes, in ms.

    Written as it always was: without ``p99_9_ms`` when the histogram was not exposed
    (``observed`` False), ``per_s`` only when measured over a known time, and the rows per
    statement under ``rows_key`` (``rows_per_statement``, or ``rows_per_claim`` for the claim)
    only when the node exposed its batch sizes.
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
class CpuUsage:
    """CPU seconds per component during a load (*other*: the rest of the machine)."""

    wall_s: float | None = None
    nodes_s: float | None = None
    per_node_s: dict[str, float] = field(default_factory=dict)
    node_util: float | None = None
    postgres_s: float | None = None
    broker_s: float | None = None
    harness_s: float | None = None
    machine_busy_s: float | None = None
    machine_util: float | None = None
    other_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "nodes_s": self.nodes_s,
            "per_node_s": dict(self.per_node_s),
            "node_util": self.node_util,
            "postgres_s": self.postgres_s,
            "broker_s": self.broker_s,
            "harness_s": self.harness_s,
            "machine_busy_s": self.machine_busy_s,
            "machine_util": self.machine_util,
            "other_s": self.other_s,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> CpuUsage | None:
        if not data:
            return None
        return cls(
            wall_s=json_num(data, "wall_s"),
            nodes_s=json_num(data, "nodes_s"),
            per_node_s=dict(json_map(data, "per_node_s")),
            node_util=json_num(data, "node_util"),
            postgres_s=json_num(data, "postgres_s"),
            broker_s=json_num(data, "broker_s"),
            harness_s=json_num(data, "harness_s"),
            machine_busy_s=json_num(data, "machine_busy_s"),
            machine_util=json_num(data, "machine_util"),
            other_s=json_num(data, "other_s"),
        )

    def get(self, key: str) -> float | None:
        """A column of the report's CPU table by its key."""
        value = self.as_dict()[key]
        return value if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class CpuPerMessage:
    """CPU microseconds per message handled (every message sent to Chronos during the load,
    a background load's included): the node's process tree, the broker, Postgres and the
    load generator."""

    messages: int | None = None
    node_us: float | None = None
    broker_us: float | None = None
    postgres_us: float | None = None
    harness_us: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "node_us": self.node_us,
            "broker_us": self.broker_us,
            "postgres_us": self.postgres_us,
            "harness_us": self.harness_us,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> CpuPerMessage | None:
        if not data:
            return None
        return cls(
            messages=json_int(data, "messages"),
            node_us=json_num(data, "node_us"),
            broker_us=json_num(data, "broker_us"),
            postgres_us=json_num(data, "postgres_us"),
            harness_us=json_num(data, "harness_us"),
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


@dataclass(frozen=True, slots=True)
class TableCounts:
    """The table's rows at one sample (pre-loaded far-future rows never counted)."""

    waiting: int | None
    claimed: int | None
    overdue: int | None
    oldest_overdue_s: float | None = None


@dataclass(frozen=True, slots=True)
class StackSample:
    """One second of the sampler, a line of ``samples.json``: node RSS (``rss_mb_<i>``), the
    table (absent when the database did not answer), the consumer lag (None when no node's
    ``/metrics`` answered) and the messages held in flight."""

    t_ms: int
    load1: float | None = None
    rss_mb: dict[int, float | None] = field(default_factory=dict)
    table: TableCounts | None = None
    consumer_lag: float | None = None
    in_flight: float | None = None

    @property
    def rows(self) -> int | None:
        """Rows waiting or claimed (None when either is unknown)."""
        t = self.table
        if t is None or t.waiting is None or t.claimed is None:
            return None
        return int(t.waiting) + int(t.claimed)

    @property
    def overdue(self) -> int | None:
        return None if self.table is None else self.table.overdue

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t_ms": self.t_ms, "load1": self.load1}
        out.update({f"rss_mb_{i}": mb for i, mb in self.rss_mb.items()})
        if self.table is not None:
            out.update(
                waiting=self.table.waiting,
                claimed=self.table.claimed,
                overdue=self.table.overdue,
                oldest_overdue_s=self.table.oldest_overdue_s,
            )
        out.update(consumer_lag=self.consumer_lag, in_flight=self.in_flight)
        return out

    @classmethod
    def from_dict(cls, data: Json) -> StackSample:
        has_table = any(k in data for k in ("waiting", "claimed", "overdue"))
        return cls(
            t_ms=int(data["t_ms"]),
            load1=json_num(data, "load1"),
            rss_mb={
                int(k.removeprefix("rss_mb_")): v
                for k, v in data.items()
                if k.startswith("rss_mb_")
            },
            table=TableCounts(
                json_int(data, "waiting"),
                json_int(data, "claimed"),
                json_int(data, "overdue"),
                json_num(data, "oldest_overdue_s"),
            )
            if has_table
            else None,
            consumer_lag=json_num(data, "consumer_lag"),
            in_flight=json_num(data, "in_flight"),
        )
