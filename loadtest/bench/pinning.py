"""CPU pinning for the ``scaling`` scenario: each component of the stack on CPUs of its own
when the machine has enough of them, so that adding a node adds CPU for nodes only.

The plan is drawn once for the largest node count of the curve and every run of it uses the
same CPUs for Postgres, the broker and the load generator (the nodes take the first N of
theirs): the curve then varies the nodes alone. When the machine has too few CPUs the plan
says so and nothing is pinned: every component shares every CPU, and the figures measure the
machine's CPU budget as much as Chronos.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

POSTGRES_CPUS = 2  # the shared database: never the first thing to saturate in the curve
BROKER_CPUS = 1
LOAD_GENERATOR_CPUS = 1
NODE_CPUS = 1  # a node is one Python process for its loops, plus librdkafka's threads


@dataclass(frozen=True)
class PinPlan:
    """Which CPUs each component gets (empty: not pinned, ``reason`` says why)."""

    available: tuple[int, ...]
    nodes: int  # the node count the plan was drawn for (the curve's largest)
    postgres: tuple[int, ...] = ()
    broker: tuple[int, ...] = ()
    load_generator: tuple[int, ...] = ()
    node_cpus: tuple[tuple[int, ...], ...] = ()
    reason: str = ""
    needed: int = 0

    @property
    def pinned(self) -> bool:
        return bool(self.postgres)

    def for_node(self, index: int) -> tuple[int, ...]:
        return self.node_cpus[index] if self.pinned and index < len(self.node_cpus) else ()

    def describe(self) -> str:
        if not self.pinned:
            return self.reason
        nodes = ", ".join(f"node {i}: {_cpus(c)}" for i, c in enumerate(self.node_cpus))
        return (
            f"pinned: Postgres {_cpus(self.postgres)}, broker {_cpus(self.broker)}, "
            f"load generator {_cpus(self.load_generator)}, {nodes}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "pinned": self.pinned,
            "available": list(self.available),
            "needed": self.needed,
            "nodes": self.nodes,
            "postgres": list(self.postgres),
            "broker": list(self.broker),
            "load_generator": list(self.load_generator),
            "node_cpus": [list(c) for c in self.node_cpus],
            "description": self.describe(),
        }


def _cpus(cpus: Sequence[int]) -> str:
    return "CPU " + ",".join(str(c) for c in cpus)


def plan_pinning(available: Iterable[int], nodes: int) -> PinPlan:
    """Postgres, the broker, the load generator and ``nodes`` nodes each on CPUs of their
    own, taken in order from ``available`` (this process's affinity); or, when there are too
    few, a plan that pins nothing and says what it would have needed."""
    cpus = tuple(sorted(set(available)))
    needed = POSTGRES_CPUS + BROKER_CPUS + LOAD_GENERATOR_CPUS + nodes * NODE_CPUS
    if len(cpus) < needed:
        return PinPlan(
            cpus,
            nodes,
            needed=needed,
            reason=(
                f"not pinned: {len(cpus)} CPUs; Postgres ({POSTGRES_CPUS}), the broker "
                f"({BROKER_CPUS}), the load generator ({LOAD_GENERATOR_CPUS}) and {nodes} "
                f"nodes ({NODE_CPUS} each) on CPUs of their own need {needed}. Every component "
                "shares every CPU: the curve shows the machine's CPU budget being shared "
                "out, not what another node adds"
            ),
        )
    it = iter(cpus)

    def take(n: int) -> tuple[int, ...]:
        return tuple(next(it) for _ in range(n))

    postgres, broker, load_generator = (
        take(POSTGRES_CPUS),
        take(BROKER_CPUS),
        take(LOAD_GENERATOR_CPUS),
    )
    node_cpus = tuple(take(NODE_CPUS) for _ in range(nodes))
    return PinPlan(cpus, nodes, postgres, broker, load_generator, node_cpus, needed=needed)


def pin_tree(root: int | None, cpus: Sequence[int]) -> int:
    """Every thread of ``root`` and of its descendants onto ``cpus`` (threads and processes
    started later inherit it); returns how many threads were pinned. Nothing without CPUs."""
    if root is None or not cpus:
        return 0
    try:
        pids = [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
    except psutil.Error:
        return 0
    pinned = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, set(cpus))
                pinned += 1
    return pinned


def own_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on (its affinity; every CPU where there is none)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))
