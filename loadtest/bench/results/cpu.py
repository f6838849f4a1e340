"""CPU time per component during a load, and per message handled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtest.bench.results.jsonread import Json, json_int, json_map, json_num


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """CPU seconds per component during a load (*other*: the rest of the machine).
    ``postgres_s`` is all of Postgres's; ``sampler_postgres_s`` the part of it that answered
    the benchmark's own sampler (its count of the waiting rows every second), not Chronos.
    ``postgres_idle_cores``: Postgres's CPU seconds per wall second with the run's nodes up and
    no load, measured just before it (their polls, heartbeats and leaders' statements in every
    shard): the part of its cost that grows with the time and the shards, not the messages."""

    wall_s: float | None = None
    nodes_s: float | None = None
    per_node_s: dict[str, float] = field(default_factory=dict)
    node_util: float | None = None
    postgres_s: float | None = None
    sampler_postgres_s: float | None = None
    broker_s: float | None = None
    harness_s: float | None = None
    machine_busy_s: float | None = None
    machine_util: float | None = None
    other_s: float | None = None
    postgres_idle_cores: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": self.wall_s,
            "nodes_s": self.nodes_s,
            "per_node_s": dict(self.per_node_s),
            "node_util": self.node_util,
            "postgres_s": self.postgres_s,
            "sampler_postgres_s": self.sampler_postgres_s,
            "broker_s": self.broker_s,
            "harness_s": self.harness_s,
            "machine_busy_s": self.machine_busy_s,
            "machine_util": self.machine_util,
            "other_s": self.other_s,
            "postgres_idle_cores": self.postgres_idle_cores,
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
            sampler_postgres_s=json_num(data, "sampler_postgres_s"),
            broker_s=json_num(data, "broker_s"),
            harness_s=json_num(data, "harness_s"),
            machine_busy_s=json_num(data, "machine_busy_s"),
            machine_util=json_num(data, "machine_util"),
            other_s=json_num(data, "other_s"),
            postgres_idle_cores=json_num(data, "postgres_idle_cores"),
        )

    def get(self, key: str) -> float | None:
        """A column of the report's CPU table by its key."""
        value = self.as_dict()[key]
        return value if isinstance(value, int | float) else None

    @property
    def chronos_postgres_s(self) -> float | None:
        """Postgres's CPU without what the benchmark's sampler cost it: Chronos's share."""
        if self.postgres_s is None:
            return None
        return round(max(0.0, self.postgres_s - (self.sampler_postgres_s or 0.0)), 2)

    @property
    def postgres_beyond_idle_s(self) -> float | None:
        """Chronos's Postgres CPU less what the idle rate would have cost over the same wall
        time: the work the load itself added."""
        chronos = self.chronos_postgres_s
        if chronos is None or self.postgres_idle_cores is None or self.wall_s is None:
            return None
        return round(max(0.0, chronos - self.postgres_idle_cores * self.wall_s), 3)


@dataclass(frozen=True, slots=True)
class CpuPerMessage:
    """CPU microseconds per message handled (every message sent to Chronos during the load,
    a background load's included): the node's process tree, the broker, Postgres and the
    load generator. ``postgres_beyond_idle_us``: Postgres's beyond its idle rate over the same
    wall time (``CpuUsage.postgres_idle_cores``), what a message itself costs it."""

    messages: int | None = None
    node_us: float | None = None
    broker_us: float | None = None
    postgres_us: float | None = None
    harness_us: float | None = None
    postgres_beyond_idle_us: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "node_us": self.node_us,
            "broker_us": self.broker_us,
            "postgres_us": self.postgres_us,
            "harness_us": self.harness_us,
            "postgres_beyond_idle_us": self.postgres_beyond_idle_us,
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
            postgres_beyond_idle_us=json_num(data, "postgres_beyond_idle_us"),
        )


@dataclass(frozen=True, slots=True)
class PerCore:
    """Messages handled per CPU second of each component: the messages per second one core of
    it carries at this load's mix (``1e6 / µs per message``), the figure that holds across
    machines; beside it the raw rate of the same load (messages handled / wall seconds) and the
    cores each component used meanwhile (CPU seconds / wall seconds). Postgres's leave out
    what the benchmark's own sampler cost it."""

    messages: int | None = None
    wall_s: float | None = None
    handled_per_s: float | None = None
    postgres: float | None = None  # messages per Postgres CPU second
    node: float | None = None  # ... per CPU second of the nodes' process trees, all nodes
    broker: float | None = None  # ... per broker CPU second
    postgres_cores: float | None = None
    node_cores: float | None = None
    broker_cores: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "wall_s": self.wall_s,
            "handled_per_s": self.handled_per_s,
            "msg_per_postgres_cpu_s": self.postgres,
            "msg_per_node_cpu_s": self.node,
            "msg_per_broker_cpu_s": self.broker,
            "postgres_cores": self.postgres_cores,
            "node_cores": self.node_cores,
            "broker_cores": self.broker_cores,
        }

    @classmethod
    def from_dict(cls, data: Json | None) -> PerCore | None:
        if not data:
            return None
        return cls(
            messages=json_int(data, "messages"),
            wall_s=json_num(data, "wall_s"),
            handled_per_s=json_num(data, "handled_per_s"),
            postgres=json_num(data, "msg_per_postgres_cpu_s"),
            node=json_num(data, "msg_per_node_cpu_s"),
            broker=json_num(data, "msg_per_broker_cpu_s"),
            postgres_cores=json_num(data, "postgres_cores"),
            node_cores=json_num(data, "node_cores"),
            broker_cores=json_num(data, "broker_cores"),
        )


def per_core(cpu: CpuUsage | None, messages: int | None) -> PerCore | None:
    """``messages`` handled during a load that used ``cpu``, per CPU second of each component.

    A component that used no CPU at all (none in the run: the ceiling has no broker) has no
    figure, never an infinite one; nor has a run with no messages."""
    if cpu is None or not messages or messages <= 0:
        return None
    wall = cpu.wall_s

    def per_s(seconds: float | None) -> float | None:
        return None if not seconds or seconds <= 0 else round(messages / seconds)

    def cores(seconds: float | None) -> float | None:
        return None if seconds is None or not wall else round(seconds / wall, 2)

    return PerCore(
        messages=messages,
        wall_s=wall,
        handled_per_s=None if not wall else round(messages / wall, 1),
        postgres=per_s(cpu.chronos_postgres_s),
        node=per_s(cpu.nodes_s),
        broker=per_s(cpu.broker_s),
        postgres_cores=cores(cpu.chronos_postgres_s),
        node_cores=cores(cpu.nodes_s),
        broker_cores=cores(cpu.broker_s),
    )
