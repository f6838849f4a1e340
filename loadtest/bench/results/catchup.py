"""What the ``catchup`` scenario measured: the overdue backlog's fired rate against
``CHRONOS_CATCHUP_RATE`` and the on-time stream's lateness while it drained."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from loadtest.bench.results.jsonread import Json, json_int, json_num


@dataclass(frozen=True, slots=True)
class CatchupFigures:
    catchup_rate: float  # CHRONOS_CATCHUP_RATE of the restarted nodes, msg/s cluster-wide
    away_s: float  # how long every node was stopped after the backlog came due
    backlog_sent: int
    backlog_fired: int  # distinct ids on the output topic
    backlog_dead_lettered: int
    backlog_lost: int  # sent, on neither topic
    fired_before_restart: int  # backlog fired before the nodes came back (should be 0)
    duplicates: int  # output records beyond one per id, backlog and stream
    drain_s: float | None  # first to last fire of the backlog
    backlog_rate_per_s: float | None  # fired / drain_s
    busiest_window_per_s: float | None  # the busiest WINDOW_S of the drain
    stream_sent: int
    stream_lost: int
    stream_measured: int  # stream messages due more than a second after the nodes were ready
    stream_during_drain: int  # ... of which due before the backlog's last fire
    stream_p99_ms: float | None  # their lateness (fire time - deadline)
    stream_max_ms: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Json | None) -> CatchupFigures | None:
        if not data:
            return None

        def whole(key: str) -> int:
            return json_int(data, key) or 0

        return cls(
            catchup_rate=json_num(data, "catchup_rate") or 0.0,
            away_s=json_num(data, "away_s") or 0.0,
            backlog_sent=whole("backlog_sent"),
            backlog_fired=whole("backlog_fired"),
            backlog_dead_lettered=whole("backlog_dead_lettered"),
            backlog_lost=whole("backlog_lost"),
            fired_before_restart=whole("fired_before_restart"),
            duplicates=whole("duplicates"),
            drain_s=json_num(data, "drain_s"),
            backlog_rate_per_s=json_num(data, "backlog_rate_per_s"),
            busiest_window_per_s=json_num(data, "busiest_window_per_s"),
            stream_sent=whole("stream_sent"),
            stream_lost=whole("stream_lost"),
            stream_measured=whole("stream_measured"),
            stream_during_drain=whole("stream_during_drain"),
            stream_p99_ms=json_num(data, "stream_p99_ms"),
            stream_max_ms=json_num(data, "stream_max_ms"),
        )
