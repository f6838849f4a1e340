"""``GET /admin/v1/shards`` (docs/shards.md): each shard's database, answering or not, with its
own counts (as ``/stats`` gives them for all), the map, and the partitions moved away from it.
With one database: one shard, shard 0."""

from __future__ import annotations

from typing import Any

from chronos.admin.messages.views import stats_json
from chronos.admin.params import parse_query
from chronos.config.settings import Settings
from chronos.config.shards import parse_shard_map
from chronos.errors import StoreError
from chronos.store import COUNT_LIMIT, EXACT_COUNT_BELOW, Store
from chronos.store.moves import PartitionMove, merge

Reply = tuple[int, Any]


class ShardEndpoints:
    def __init__(self, settings: Settings, store: Store, parked_at: int) -> None:
        self.stores: list[Store] = list(getattr(store, "stores", None) or [store])
        self.spec = parse_shard_map(settings.shard_map, len(self.stores)).spec
        self.parked_at = parked_at

    def list(self, query: str) -> Reply:
        parse_query(query, frozenset())
        shards: list[dict[str, Any]] = []
        views: list[list[PartitionMove]] = []
        for index, store in enumerate(self.stores):
            try:
                backlog = store.backlog(
                    self.parked_at, exact_below=EXACT_COUNT_BELOW, count_limit=COUNT_LIMIT
                )
                views.append(store.partition_moves() if len(self.stores) > 1 else [])
            except StoreError as exc:
                if exc.refused:
                    raise  # a missing grant: the API's 500 names it
                shards.append({"shard": index, "up": False, "error": "unavailable"})
                continue
            shards.append({"shard": index, "up": True, **stats_json(backlog, self.parked_at)})
        moves = [
            {"partition": m.partition, "shard": m.shard, "state": m.state}
            for m in sorted(merge(views).values())
        ]
        return 200, {"map": self.spec, "shards": shards, "moves": moves}
