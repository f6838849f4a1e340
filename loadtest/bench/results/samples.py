"""The sampler's seconds: node RSS, the table's rows, the consumer lag (``samples.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.bench.results.jsonread import Json, json_int, json_num


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
