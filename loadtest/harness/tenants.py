"""The multi-tenant load: one tenant's flood due at one instant while small tenants keep a steady
rate, to measure fairness between tenants.

* the **flood**: ``flood_count`` messages of tenant ``flood``, sent at ``flood_rate`` msg/s from
  the start, all due at ``start + flood_at_ms``;
* the **small tenants** ``small-00 … small-NN``: from ``small_from_ms`` after the start, each
  sends ``small_rate`` msg/s for ``duration_s`` (round robin, evenly spaced), every message due
  ``small_delay_ms`` after it is sent. Their deadlines before, during and after the flood's
  instant show whether a small tenant waits behind the flood.

Every record carries the tracking header ``loadtestTenant`` (relayed by Chronos, so the recorder
keeps the tenant of each output record) and, unless ``header`` is off (the control run: the same
messages, all in the default tenant), ``chronosTenant``. The slots of both streams are merged into
one open-loop schedule of absolute send times (:class:`PlannedSchedule`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FLOOD = "flood"
SMALL_PREFIX = "small-"


def small_name(index: int) -> str:
    return f"{SMALL_PREFIX}{index:02d}"


def tenant_class(tenant: str | None) -> str:
    """``flood``, ``small`` or ``none`` (a message of no tenant)."""
    if tenant == FLOOD:
        return "flood"
    if tenant is not None and tenant.startswith(SMALL_PREFIX):
        return "small"
    return "none"


@dataclass(frozen=True, slots=True)
class TenantLoad:
    flood_count: int
    flood_rate: float  # msg/s while the flood is sent
    flood_at_ms: int  # the flood is due this long after the start
    small_tenants: int
    small_rate: float  # msg/s of each small tenant
    small_delay_ms: int
    duration_s: float  # how long the small tenants send
    small_from_ms: int = 0  # the small tenants start sending this long after the start
    header: bool = True  # send chronosTenant (off: the control run without tenants)
    linger_ms: int = 5  # the load generator's linger.ms (see loadtest.bench.scenarios)

    def __post_init__(self) -> None:
        if self.flood_count < 0 or self.small_tenants < 0:
            raise ValueError("counts must be >= 0")
        if self.flood_count and not self.flood_rate > 0:
            raise ValueError("the flood rate must be positive")
        if self.small_tenants and not (self.small_rate > 0 and self.duration_s > 0):
            raise ValueError("the small tenants need a positive rate and duration")
        if self.flood_at_ms < 0 or self.small_delay_ms < 0 or self.small_from_ms < 0:
            raise ValueError("delays must be >= 0")

    @property
    def small_count(self) -> int:
        return math.floor(self.small_tenants * self.small_rate * self.duration_s)

    @property
    def count(self) -> int:
        return self.flood_count + self.small_count

    @property
    def tenant_names(self) -> list[str]:
        """Index 0 is the flood, 1.. the small tenants (the plan's tenant indexes)."""
        return [FLOOD, *(small_name(i) for i in range(self.small_tenants))]

    def flood_send_s(self) -> float:
        return self.flood_count / self.flood_rate if self.flood_count else 0.0

    def plan(self) -> Plan:
        """Every message's send offset (s), tenant index and deadline rule, in send order."""
        flood_t = np.arange(self.flood_count, dtype=np.float64) / (self.flood_rate or 1.0)
        n = self.small_count
        small_rate = self.small_tenants * self.small_rate
        small_t = self.small_from_ms / 1000 + np.arange(n, dtype=np.float64) / (small_rate or 1.0)
        times = np.concatenate([flood_t, small_t])
        tenant = np.concatenate(
            [
                np.zeros(self.flood_count, dtype=np.int16),
                (np.arange(n, dtype=np.int64) % max(self.small_tenants, 1) + 1).astype(np.int16),
            ]
        )
        order = np.argsort(times, kind="stable")
        return Plan(times[order], tenant[order])

    def harness_args(self) -> list[str]:
        args = [
            "--flood-count",
            str(self.flood_count),
            "--flood-at",
            f"{self.flood_at_ms}ms",
            "--rate",
            _num(self.flood_rate),
            "--small-tenants",
            str(self.small_tenants),
            "--small-rate",
            _num(self.small_rate),
            "--small-delay",
            f"{self.small_delay_ms}ms",
            "--small-from",
            f"{self.small_from_ms}ms",
            "--duration",
            f"{_num(self.duration_s)}s",
            "--linger-ms",
            str(self.linger_ms),
        ]
        return args if self.header else [*args, "--no-tenant-header"]

    def describe(self) -> str:
        return (
            f"{self.flood_count:,} of one tenant due at {self.flood_at_ms / 1000:g} s + "
            f"{self.small_tenants} tenants x {self.small_rate:g} msg/s "
            f"from {self.small_from_ms / 1000:g} s (due {self.small_delay_ms / 1000:g} s after "
            "sending)" + ("" if self.header else ", no tenant headers")
        )


@dataclass(frozen=True, slots=True)
class Plan:
    offsets_s: np.ndarray  # send time of each slot, from the start, ascending
    tenant: np.ndarray  # int16 index into TenantLoad.tenant_names; 0 is the flood

    def __len__(self) -> int:
        return len(self.offsets_s)


@dataclass(frozen=True, slots=True)
class PlannedSchedule:
    """Open-loop slots at planned absolute times (``start + offsets_s[i]``); the interface of
    ``loadtest.harness.schedule.RateSchedule`` that ``pace`` uses."""

    offsets_s: np.ndarray
    start: float

    @property
    def total(self) -> int:
        return len(self.offsets_s)

    def slot_time(self, index: int) -> float:
        return self.start + float(self.offsets_s[index])

    def due(self, now: float) -> int:
        """How many slots are due at ``now`` (slots ``0 .. due-1``)."""
        return int(np.searchsorted(self.offsets_s, now - self.start + 1e-9, side="right"))


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
