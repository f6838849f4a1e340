"""``bench.json`` read back: the run and its scenarios as the verdicts
(``loadtest.bench.evaluation``) and the report (``loadtest.bench.report``) read them, never as
dictionaries. A figure a record lacks (an older or a failed run) is None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadtest.analysis.delivery import Delivery, LossLocation, Row, ScenarioDelivery
from loadtest.bench.results.catchup import CatchupFigures
from loadtest.bench.results.cpu import CpuPerMessage, CpuUsage, PerCore
from loadtest.bench.results.jsonread import Json, json_int, json_map, json_num, json_str
from loadtest.bench.results.load import BacklogVerdict, Drain, Intake, Preload, SteadyRates
from loadtest.bench.results.node import Profile, Stall, StatementStats
from loadtest.bench.results.postgres import PgBreakdown
from loadtest.bench.results.tenants import TenantFigures


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
        return cls(
            json_num(data, "p50"),
            json_num(data, "p99"),
            json_num(data, "p99_9"),
            json_num(data, "max"),
        )

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
            json_int(data, "sent"),
            json_int(data, "fired_distinct"),
            json_int(data, "lost"),
            json_int(data, "duplicate_ids"),
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
    cpu_per_message: CpuPerMessage | None = None
    per_core: PerCore | None = None
    postgres_breakdown: PgBreakdown | None = None
    stalls: list[Stall] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    profile: Profile | None = None
    loss_location: LossLocation | None = None
    output_holes: int | None = None  # missing offsets in the recorded output
    tenants: TenantFigures | None = None  # a multi-tenant load's fairness figures
    background_sent: int | None = None  # the intake load beside the measured one...
    background_stored: int | None = None  # ...and how much of it is in the table at the end
    pinned: bool | None = None  # ``scaling``: each component on CPUs of its own...
    pinning: str | None = None  # ...or why not (``loadtest.bench.pinning``)
    catchup: CatchupFigures | None = None  # ``catchup``: the paced drain and the stream

    @property
    def background_missing(self) -> int | None:
        if self.background_sent is None or self.background_stored is None:
            return None
        return max(0, self.background_sent - self.background_stored)

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
        summary = json_map(data, "summary")
        return cls(
            name=str(data.get("name")),
            kind=json_str(data, "kind"),
            status=json_str(data, "status"),
            error=json_str(data, "error"),
            nodes=json_int(data, "nodes"),
            load=str(data.get("load", "")),
            duration_s=json_num(json_map(data, "workload"), "duration_s"),
            delay=json_str(json_map(data, "workload"), "delay"),
            count=json_int(json_map(data, "workload"), "count"),
            offered_rate=json_num(data, "offered_rate"),
            preload_rows=json_int(data, "preload_rows") or 0,
            ceiling_msg_per_s=json_num(json_map(data, "result"), "ceiling_msg_per_s"),
            counts=Counts.from_dict(json_map(summary, "counts")),
            lateness=Lateness.from_dict(summary.get("lateness_ms")),
            early_count=json_int(json_map(summary, "early"), "early_count"),
            delivery=Delivery.from_dict(summary.get("delivery")),
            steady=SteadyRates.from_dict(data.get("steady")),
            backlog=BacklogVerdict.from_dict(data.get("backlog")),
            drain=Drain.from_dict(data.get("drain")),
            intake=Intake.from_dict(data.get("intake")),
            preload=Preload.from_dict(data.get("preload")),
            claim=StatementStats.from_dict(json_map(data, "claim")),
            node_lateness=StatementStats.from_dict(json_map(data, "node_lateness")),
            published_directly=json_int(json_map(data, "node_counters"), "published_directly"),
            rss_max_mb=json_num(data, "rss_max_mb"),
            cpu=CpuUsage.from_dict(json_map(data, "cpu")),
            cpu_per_message=CpuPerMessage.from_dict(json_map(data, "cpu_per_message")),
            per_core=PerCore.from_dict(json_map(data, "per_core")),
            postgres_breakdown=PgBreakdown.from_dict(json_map(data, "postgres_breakdown")),
            stalls=[Stall.from_dict(s) for s in data.get("stalls") or []],
            files={str(k): str(v) for k, v in json_map(data, "files").items()},
            profile=Profile.from_dict(json_map(data, "profile")),
            loss_location=LossLocation.from_dict(data.get("loss_location")),
            output_holes=json_int(json_map(data, "output_gaps"), "missing"),
            tenants=TenantFigures.from_dict(summary.get("tenants")),
            background_sent=json_int(json_map(data, "background"), "sent"),
            background_stored=json_int(json_map(data, "background"), "stored"),
            pinned=_json_bool(json_map(data, "pinning"), "pinned"),
            pinning=json_str(json_map(data, "pinning"), "description"),
            catchup=CatchupFigures.from_dict(json_map(data, "catchup")),
        )


def _json_bool(data: Json, key: str) -> bool | None:
    value = data.get(key)
    return value if isinstance(value, bool) else None


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
            elapsed_s=json_num(data, "elapsed_s"),
            machine=json_map(data, "machine"),
            stack=json_map(data, "stack"),
        )


def rows_as_dicts(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in rows]
