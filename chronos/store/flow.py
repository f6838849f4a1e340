"""Flow control as the store keeps it: the paused tenants and target topics, and the paced
catch-up's part of a claim.

A pause names a tenant (``''``: the default tenant) or a target topic (the output topic stands for
the messages that name none). The nodes read the pause set every second (``PAUSE_REFRESH_S``) and
pass it to their claims, which skip the paused rows, except those already past their expiry limit:
they are claimed, and dead-lettered as expired, as if nothing were paused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

PAUSE_REFRESH_S = 1.0
"""Seconds between two reads of the pause set by a node: a pause is in force within this."""

RESUME_REFRESH_S = 0.1
"""The same while something is paused: a resume is seen within this, and the overdue messages
it frees fire at once, not up to a second later (a read of the few pause rows, ten a second,
and only while a pause lasts)."""


@dataclass(frozen=True, slots=True)
class Catchup:
    """The paced catch-up of one claim: rows overdue by more than ``after_ms`` are claimed apart,
    at most ``limit`` of them (the node's tokens), the rows coming due now as before."""

    after_ms: int
    limit: int


class PauseKind(Enum):
    TENANT = "tenant"
    TOPIC = "topic"


@dataclass(frozen=True, slots=True)
class Pause:
    """One paused tenant or target topic."""

    kind: PauseKind
    name: str
    paused_at: datetime
    paused_by: str


@dataclass(frozen=True, slots=True)
class Limit:
    """A rate limit of a tenant or a target topic: messages per second, cluster-wide."""

    kind: PauseKind
    name: str
    per_second: int
    set_at: datetime
    set_by: str


@dataclass(frozen=True, slots=True)
class PauseSet:
    """What the claims skip: the paused tenants, and the paused target topics as the claim
    compares them (``''`` standing for the output topic: the rows that name no topic)."""

    tenants: frozenset[str] = field(default_factory=frozenset)
    topics: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, pauses: Iterable[Pause], output_topic: str) -> PauseSet:
        tenants = {p.name for p in pauses if p.kind is PauseKind.TENANT}
        topics = {p.name for p in pauses if p.kind is PauseKind.TOPIC}
        if output_topic in topics:
            topics.add("")
        return cls(frozenset(tenants), frozenset(topics))

    def __bool__(self) -> bool:
        return bool(self.tenants or self.topics)

    def holds(self, tenant: str | None, target_topic: str | None) -> bool:
        """A row of this tenant and topic is paused."""
        return (tenant or "") in self.tenants or (target_topic or "") in self.topics
