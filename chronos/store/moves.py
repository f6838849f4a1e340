"""Moving an input partition to another shard (docs/shards.md): what each shard records of the
partitions moved away from the map, and a node's view of them. The move itself is
``chronos.store.postgres.moves``; intake routes by the view (``chronos.intake.partitions``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

MOVING = "moving"  # its rows are being copied: no shard takes its messages
MOVED = "moved"  # its new shard takes its messages


class PartitionMove(NamedTuple):
    """A partition moved away from the map: the shard it goes to, and how far."""

    partition: int
    shard: int
    state: str  # MOVING or MOVED
    generation: int  # a move's writes, in order: the latest wins


class MovesStore(Protocol):
    def partition_moves(self) -> list[PartitionMove]:
        """The partitions moved away from the map, as this shard records them."""
        ...


def merge(views: Iterable[Iterable[PartitionMove]]) -> dict[int, PartitionMove]:
    """The shards' views as one: each partition's latest (a move writes every shard in turn)."""
    latest: dict[int, PartitionMove] = {}
    for view in views:
        for move in view:
            known = latest.get(move.partition)
            if known is None or move.generation > known.generation:
                latest[move.partition] = move
    return latest
