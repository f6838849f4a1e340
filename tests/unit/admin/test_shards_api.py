"""``GET /admin/v1/shards``: one database is shard 0 with the counts ``/stats`` gives; over three
shards, each shard's own counts, a shard whose database does not answer marked down (not left
out, not failing the answer), the map, and the partitions moved away from it; the answer is what
the spec says."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, cast

from chronos.admin.api import AdminAPI
from chronos.errors import StoreError
from chronos.protocol import ScheduledMessage
from chronos.store import Store
from chronos.store.fanout import ShardedStore
from chronos.store.moves import MOVED, MOVING, PartitionMove
from chronos.testing import InMemoryStore, ManualClock
from tests.unit.admin.helpers import AUTH, AdminHarness, make_settings, validate


class Away(InMemoryStore):
    def backlog(self, *args: Any, **kwargs: Any) -> Any:
        raise StoreError("connection refused", outage=True)


def test_one_database_is_shard_zero_with_the_stats_counts() -> None:
    h = AdminHarness()
    h.seed(3)
    status, _, body = h.call("GET", "/admin/v1/shards")
    assert status == 200
    validate(body, "ShardList")
    _, _, stats = h.call("GET", "/admin/v1/stats")
    assert body["map"] == "mod" and body["moves"] == []
    assert body["shards"] == [{"shard": 0, "up": True, **stats}]


def test_each_shard_its_counts_one_away_marked_down_and_the_moves() -> None:
    clock = ManualClock()
    stores = [InMemoryStore(clock), InMemoryStore(clock), Away(clock)]
    due = clock.now() + timedelta(minutes=5)
    stores[1].enqueue([ScheduledMessage(f"m{i}", due, b"k", b"v", []) for i in range(4)], 0)
    moves = [PartitionMove(4, 1, MOVED, 2), PartitionMove(7, 0, MOVING, 3)]
    stores[0].moves = moves[:1]
    stores[1].moves = moves  # the later write: every shard is read
    api = AdminAPI(make_settings(), cast(Store, ShardedStore(stores)))
    result = api.handle("GET", "/admin/v1/shards", "", AUTH)
    assert result is not None and result[0] == 200
    body = json.loads(result[2])
    validate(body, "ShardList")
    assert [(s["shard"], s["up"], s.get("waiting")) for s in body["shards"]] == [
        (0, True, 0),
        (1, True, 4),
        (2, False, None),
    ]
    assert body["shards"][2]["error"] == "unavailable"
    assert body["moves"] == [
        {"partition": 4, "shard": 1, "state": "moved"},
        {"partition": 7, "shard": 0, "state": "moving"},
    ]
    assert body["map"] == "mod"
