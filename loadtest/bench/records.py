"""The benchmark's results as types.

``bench.json`` is the record of a run and the format ``--render`` reads back (older runs
included), so it keeps its keys: every figure below is written with ``as_dict`` into a
scenario's record and read back with ``from_dict``, where a figure a record lacks (an older or a
failed run) is None. The verdicts (``loadtest.bench.evaluation``) and the report
(``loadtest.bench.report``) read only these types, never the dictionaries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtest.delivery import Delivery, LossLocation, Row, ScenarioDelivery

Json = Mapping[str, Any]


def _map(data: Json | None, key: str) -> Json:
    """``data[key]`` when it is an object, else an empty one."""
    value = None if data is None else data.get(key)
    return value if isinstance(value, Mapping) else {}


def _num(data: Json, key: str) -> float | None:
    """A number as JSON had it (an int stays an int: the report prints ``4`` and ``4.0``
    differently), None when missing."""
    value = data.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(data: Json, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(data: Json, key: str) -> str | None:
    value = data.get(key)
    return None if value is None else str(value)


# ------------------------------------------------------------------------ written figures


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
            seconds=_int(data, "seconds"),
            sent_per_s=_num(data, "sent_per_s"),
            due_per_s=_num(data, "due_per_s"),
            fired_per_s=_num(data, "fired_per_s"),
            fired_to_due=_num(data, "fired_to_due"),
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
            expected_rows=_int(data, "expected_rows"),
            rows_at_send_end=_int(data, "rows_at_send_end"),
            max_rows=_int(data, "max_rows"),
            max_overdue=_int(data, "max_overdue"),
            checks={
                name: Check(c["value"], c["limit"], bool(c["ok"]))
                for name, c in _map(data, "checks").items()
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
            count=_int(data, "count"),
            first_fired_ms=_int(data, "first_fired_ms"),
            last_fired_ms=_int(data, "last_fired_ms"),
            seconds=_num(data, "seconds"),
            rate_per_s=_num(data, "rate_per_s"),
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
        return cls(_num(data, "stored_after_s"), _num(data, "rate_per_s"))


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
            _int(data, "rows"),
            _num(data, "insert_s"),
            _num(data, "seconds"),
            _num(data, "table_mb"),
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
        return cls(int(data["node"]), int(data["t_ms"]), _int(data, "overdue"), str(data["file"]))


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
            count=_int(data, "count"),
            mean_ms=_num(data, "mean_ms"),
            p50_ms=_num(data, "p50_ms"),
            p99_ms=_num(data, "p99_ms"),
            p99_9_ms=_num(data, "p99_9_ms"),
            per_s=_num(data, "per_s"),
            rows=None if key is None else _num(data, key),
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
            wall_s=_num(data, "wall_s"),
            nodes_s=_num(data, "nodes_s"),
            per_node_s=dict(_map(data, "per_node_s")),
            node_util=_num(data, "node_util"),
            postgres_s=_num(data, "postgres_s"),
            broker_s=_num(data, "broker_s"),
            harness_s=_num(data, "harness_s"),
            machine_busy_s=_num(data, "machine_busy_s"),
            machine_util=_num(data, "machine_util"),
            other_s=_num(data, "other_s"),
        )

    def get(self, key: str) -> float | None:
        """A column of the report's CPU table by its key."""
        value = self.as_dict()[key]
        return value if isinstance(value, int | float) else None


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
            threads=dict(_map(data, "threads")),
            error=_str(data, "error"),
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


# --------------------------------------------------------------------- read-back records


@dataclass(frozen=True, slots=True)
class Lateness:
    """Lateness percentiles in ms (``summary.lateness_ms``)."""

    p50: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    max: float | None = None

    @classmethod
    def from_dict(cls, data: Json | None) -> Lateness | None:
        if data is None:
            return None
        return cls(_num(data, "p50"), _num(data, "p99"), _num(data, "p99_9"), _num(data, "max"))

    def get(self, key: str) -> float | None:
        """``p99`` or ``p99_9`` by name (the precision notes are written for both)."""
        return {"p50": self.p50, "p99": self.p99, "p99_9": self.p99_9, "max": self.max}[key]


@dataclass(frozen=True, slots=True)
class Counts:
    sent: int | None = None
    fired_distinct: int | None = None
    lost: int | None = None
    duplicate_ids: int | None = None

    @classmethod
    def from_dict(cls, data: Json | None) -> Counts:
        data = data or {}
        return cls(
            _int(data, "sent"),
            _int(data, "fired_distinct"),
            _int(data, "lost"),
            _int(data, "duplicate_ids"),
        )


@dataclass(frozen=True, slots=True)
class ScenarioRecord:
    """One scenario of ``bench.json``, as the verdicts and the report read it."""

    name: str
    kind: str | None
    status: str | None
    error: str | None = None
    nodes: int | None = None
    load: str = ""
    duration_s: float | None = None  # of the workload
    delay: str | None = None
    count: int | None = None
    offered_rate: float | None = None
    preload_rows: int = 0
    ceiling_msg_per_s: float | None = None
    counts: Counts = field(default_factory=Counts)
    lateness: Lateness | None = None  # None: the summary has none
    early_count: int | None = None
    delivery: Delivery | None = None
    steady: SteadyRates | None = None
    backlog: BacklogVerdict | None = None
    drain: Drain | None = None
    intake: Intake = field(default_factory=Intake)
    preload: Preload = field(default_factory=Preload)
    claim: StatementStats = field(default_factory=StatementStats)
    node_lateness: StatementStats = field(default_factory=StatementStats)
    published_directly: int | None = None
    rss_max_mb: float | None = None
    cpu: CpuUsage | None = None
    stalls: list[Stall] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    profile: Profile | None = None
    loss_location: LossLocation | None = None
    output_holes: int | None = None  # missing offsets in the recorded output

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def delivery_figures(self) -> ScenarioDelivery:
        """What the loss and late-after-window rows need."""
        return ScenarioDelivery(
            self.name, self.counts.lost, self.delivery, self.loss_location, self.output_holes
        )

    @property
    def growing(self) -> bool | None:
        return None if self.backlog is None else self.backlog.growing

    @classmethod
    def from_dict(cls, data: Json) -> ScenarioRecord:
        summary = _map(data, "summary")
        return cls(
            name=str(data.get("name")),
            kind=_str(data, "kind"),
            status=_str(data, "status"),
            error=_str(data, "error"),
            nodes=_int(data, "nodes"),
            load=str(data.get("load", "")),
            duration_s=_num(_map(data, "workload"), "duration_s"),
            delay=_str(_map(data, "workload"), "delay"),
            count=_int(_map(data, "workload"), "count"),
            offered_rate=_num(data, "offered_rate"),
            preload_rows=_int(data, "preload_rows") or 0,
            ceiling_msg_per_s=_num(_map(data, "result"), "ceiling_msg_per_s"),
            counts=Counts.from_dict(_map(summary, "counts")),
            lateness=Lateness.from_dict(summary.get("lateness_ms")),
            early_count=_int(_map(summary, "early"), "early_count"),
            delivery=Delivery.from_dict(summary.get("delivery")),
            steady=SteadyRates.from_dict(data.get("steady")),
            backlog=BacklogVerdict.from_dict(data.get("backlog")),
            drain=Drain.from_dict(data.get("drain")),
            intake=Intake.from_dict(data.get("intake")),
            preload=Preload.from_dict(data.get("preload")),
            claim=StatementStats.from_dict(_map(data, "claim")),
            node_lateness=StatementStats.from_dict(_map(data, "node_lateness")),
            published_directly=_int(_map(data, "node_counters"), "published_directly"),
            rss_max_mb=_num(data, "rss_max_mb"),
            cpu=CpuUsage.from_dict(_map(data, "cpu")),
            stalls=[Stall.from_dict(s) for s in data.get("stalls") or []],
            files={str(k): str(v) for k, v in _map(data, "files").items()},
            profile=Profile.from_dict(_map(data, "profile")),
            loss_location=LossLocation.from_dict(data.get("loss_location")),
            output_holes=_int(_map(data, "output_gaps"), "missing"),
        )


@dataclass(frozen=True, slots=True)
class BenchRecord:
    """``bench.json`` as the verdicts and the report read it."""

    scenarios: list[ScenarioRecord]
    targets: list[Row] = field(default_factory=list)
    command: str = ""
    quick: bool = False
    started: str = "?"
    ended: str = "?"
    elapsed_s: float | None = None
    machine: Json = field(default_factory=dict)
    stack: Json = field(default_factory=dict)

    def by_kind(self, kind: str) -> list[ScenarioRecord]:
        return [r for r in self.scenarios if r.kind == kind]

    @classmethod
    def from_dict(cls, data: Json) -> BenchRecord:
        return cls(
            scenarios=[ScenarioRecord.from_dict(r) for r in data.get("scenarios", [])],
            targets=[Row.from_dict(r) for r in data.get("targets", [])],
            command=str(data.get("command", "")),
            quick=bool(data.get("quick")),
            started=str(data.get("started", "?")),
            ended=str(data.get("ended", "?")),
            elapsed_s=_num(data, "elapsed_s"),
            machine=_map(data, "machine"),
            stack=_map(data, "stack"),
        )


def rows_as_dicts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in rows]
