"""CPU time per component during a load, and per message handled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.bench.results.jsonread import Json, json_int, json_map, json_num


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
