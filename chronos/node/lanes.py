"""A node's lane: its share of one shard (docs/shards.md). Every node claims from every shard,
so each lane has the shard's store, the node's lease and election in that shard (each shard
elects its own leader for its maintenance), its monitor (heartbeat, election, the leader's
maintenance) and, once the node has registered there, its claim fence: the firing and recovery
loops of the shard are built from it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chronos.cluster.leadership import Leadership
from chronos.cluster.monitor import Monitor
from chronos.store import Store


@dataclass
class Lane:
    shard: int
    store: Store
    leadership: Leadership
    monitor: Monitor
    claims_since: datetime | None = None  # this process's start on the shard's database clock
    registering: bool = False  # a registration was sent: its reply may have been lost
