"""The fairness figures of a multi-tenant load, as ``summary.json``'s ``tenants`` section holds
them (see ``loadtest.analysis.tenants``)."""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.bench.results.jsonread import Json, json_map, json_num, json_str


@dataclass(frozen=True, slots=True)
class TenantFigures:
    small_p99_ms: float | None = None
    small_max_ms: float | None = None
    small_during_flood_p99_ms: float | None = None
    small_during_flood_count: float | None = None
    small_worst_tenant: str | None = None
    small_worst_p99_ms: float | None = None
    flood_p99_ms: float | None = None
    flood_drain_rate: float | None = None
    flood_drain_seconds: float | None = None

    @classmethod
    def from_dict(cls, data: Json | None) -> TenantFigures | None:
        if not data:
            return None
        classes = json_map(data, "classes")
        small, flood = json_map(classes, "small"), json_map(classes, "flood")
        during, worst = json_map(data, "small_during_flood"), json_map(data, "small_worst")
        drain = json_map(data, "flood_drain")
        return cls(
            small_p99_ms=json_num(small, "p99_ms"),
            small_max_ms=json_num(small, "max_ms"),
            small_during_flood_p99_ms=json_num(during, "p99_ms"),
            small_during_flood_count=json_num(during, "fired"),
            small_worst_tenant=json_str(worst, "tenant"),
            small_worst_p99_ms=json_num(worst, "p99_ms"),
            flood_p99_ms=json_num(flood, "p99_ms"),
            flood_drain_rate=json_num(drain, "rate_per_s"),
            flood_drain_seconds=json_num(drain, "seconds"),
        )
