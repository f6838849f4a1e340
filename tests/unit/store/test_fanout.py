"""The admin API over several shards answers as over one database holding the same messages
(``chronos.store.fanout``): two in-memory stores with the messages split between them, against
one store with all of them, through the same ``AdminAPI`` calls: every page walked by its cursor
(with and without filters, ties of deadline across shards, a byte budget), counts, the backlog,
one message's get and cancel, bulk actions, pauses (written to every shard), ended messages and
their summary, a tenant's deletion; and a shard that fails is named."""

from __future__ import annotations

import json
import uuid
import zlib
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from chronos.admin.api import AdminAPI
from chronos.errors import StoreError
from chronos.node import http as chronos_http
from chronos.node.http import Health
from chronos.observability import dependencies
from chronos.protocol import ScheduledMessage
from chronos.store import Ending, MessageFilter, Store
from chronos.store.fanout import ShardedStore
from chronos.store.history import FIRED
from chronos.testing import InMemoryStore, ManualClock
from tests.unit.admin.helpers import AUTH, make_settings

WEEK = timedelta(days=7)
TENANTS = ("", "acme", "beta")


class Deployment:
    """An AdminAPI over ``shards`` in-memory stores (one: a single database) at a manual clock."""

    def __init__(self, shards: int) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.stores = [InMemoryStore(self.clock) for _ in range(shards)]
        for store in self.stores:
            store.maintain_history(WEEK)
        api_store: Store = self.stores[0] if shards == 1 else cast(Store, ShardedStore(self.stores))
        self.api = AdminAPI(make_settings(), api_store)

    def shard(self, message_id: str) -> InMemoryStore:
        return self.stores[zlib.crc32(message_id.encode()) % len(self.stores)]

    def seed(self) -> None:
        """300 messages over 3 tenants, deadlines two by two (ties across shards), keys of
        growing length; 20 of them fired (a history), one fired twice."""
        base = self.clock.now() + timedelta(minutes=5)
        for i in range(300):
            message = ScheduledMessage(
                f"m{i:03}",
                base + timedelta(seconds=i // 2),
                b"k" * (i % 40),
                b"v",
                [],
                tenant=TENANTS[i % 3],
            )
            self.shard(message.id).enqueue([message], 0)
        for i in range(20):
            self.fire(f"f{i:02}", Ending(FIRED, "orders", i % 3, i, i, None), TENANTS[i % 3])
        self.fire("f00", Ending(FIRED, "orders", 0, 99, 7, None), "")  # at-least-once: twice

    def fire(self, message_id: str, ending: Ending, tenant: str) -> None:
        store, me = self.shard(message_id), str(uuid.uuid5(uuid.NAMESPACE_OID, message_id))
        due = self.clock.now() + timedelta(milliseconds=10)
        store.enqueue([ScheduledMessage(message_id, due, b"key", b"v", [], tenant=tenant)], 0)
        self.clock.advance(10)
        rows = [r for r in store.claim(me, 0, 100, 4) if r.id == message_id]
        assert store.delete_fired(me, [(r.id, r.readied_at) for r in rows], None, [ending])

    def call(self, method: str, path: str, query: str = "") -> tuple[int, Any]:
        result = self.api.handle(method, path, query, AUTH, body=b"")
        assert result is not None
        status, _, body, _ = result
        return status, json.loads(body) if body else None

    def walk(self, query: str) -> list[list[str]]:
        """Every page of ``/admin/v1/messages?query``, by its cursor: each page's ids."""
        pages, cursor = [], ""
        while True:
            status, body = self.call("GET", "/admin/v1/messages", query + cursor)
            assert status == 200, body
            pages.append([m["id"] for m in body["messages"]])
            if not body["next_cursor"]:
                return pages
            cursor = f"&cursor={body['next_cursor']}"


@pytest.fixture
def both() -> tuple[Deployment, Deployment]:
    one, sharded = Deployment(1), Deployment(3)
    one.seed()
    sharded.seed()
    held = [
        len(store.find_messages(MessageFilter(), park_attempts=4, limit=1000))
        for store in sharded.stores
    ]
    assert all(held) and sum(held) == 300  # the split put messages in every shard
    return one, sharded


@pytest.mark.parametrize(
    "query",
    [
        "limit=7",
        "limit=100",
        "limit=13&tenant=acme",
        "limit=5&tenant=",
        "limit=9&key=kkkkk&key_prefix=true",
        "limit=11&id_prefix=m1",
        "limit=6&state=fired",
        "limit=4&state=ended&tenant=acme",
        "limit=1000&count=true",
    ],
)
def test_every_page_walked_by_its_cursor_is_the_same(
    both: tuple[Deployment, Deployment], query: str
) -> None:
    one, sharded = both
    assert sharded.walk(query) == one.walk(query)


def test_counts_backlog_get_and_ended_messages_are_the_same(
    both: tuple[Deployment, Deployment],
) -> None:
    one, sharded = both
    for path, query in [
        ("/admin/v1/messages", "tenant=acme&count=true&limit=1"),
        ("/admin/v1/stats", ""),
        ("/admin/v1/messages/m123", ""),
        ("/admin/v1/messages/f00", ""),
        ("/admin/v1/tenants", ""),
    ]:
        assert sharded.call("GET", path, query) == one.call("GET", path, query), path


def test_the_summary_counts_are_the_same_and_its_percentiles_the_shards_merged(
    both: tuple[Deployment, Deployment],
) -> None:
    """The shards' lateness percentiles cannot be merged exactly (docs/shards.md): p99 is the
    highest shard's, p50 the shards' count-weighted mean."""
    (_, whole), (_, merged) = (d.call("GET", "/admin/v1/history/summary", "since=1h") for d in both)
    exact = ("tenant", "fired", "cancelled", "expired", "dead_lettered", "replaced")
    assert [{k: t[k] for k in exact} for t in merged["tenants"]] == [
        {k: t[k] for k in exact} for t in whole["tenants"]
    ]
    since = both[1].clock.now() - timedelta(hours=1)
    for tenant in merged["tenants"]:
        shards = [
            s
            for store in both[1].stores
            for s in store.summarize_history(since, tenant=tenant["tenant"])
            if s.outcome == FIRED
        ]
        assert tenant["lateness_p99_ms"] == max(s.lateness_p99_ms or 0 for s in shards)
        weighted = sum((s.lateness_p50_ms or 0) * s.count for s in shards)
        assert tenant["lateness_p50_ms"] == pytest.approx(weighted / tenant["fired"])


def test_actions_reach_the_shard_that_holds_the_message_and_bulk_ones_every_shard(
    both: tuple[Deployment, Deployment],
) -> None:
    one, sharded = both
    for deployment in both:
        assert deployment.call("DELETE", "/admin/v1/messages/m042")[0] == 204
        status, body = deployment.call("GET", "/admin/v1/messages/m042")
        assert (status, body["state"]) == (200, "cancelled")  # its history record
        assert deployment.call("DELETE", "/admin/v1/messages/nope")[0] == 404
    assert sharded.call("POST", "/admin/v1/bulk/cancel", "tenant=beta&dry_run=true") == one.call(
        "POST", "/admin/v1/bulk/cancel", "tenant=beta&dry_run=true"
    )
    for deployment in both:
        assert (
            deployment.call("POST", "/admin/v1/bulk/cancel", "tenant=beta")[1]["cancelled"] == 100
        )
        assert deployment.walk("limit=50&tenant=beta") == [[]]
    assert sharded.walk("limit=50") == one.walk("limit=50")
    for deployment in both:
        assert deployment.call("POST", "/admin/v1/pauses", "tenant=acme")[0] == 200
    assert [[p.name for p in store.pauses()] for store in sharded.stores] == [["acme"]] * 3
    assert sharded.call("GET", "/admin/v1/pauses") == one.call("GET", "/admin/v1/pauses")


def test_a_shard_that_fails_is_named() -> None:
    sharded = Deployment(2)

    def refuse(*_: Any, **__: Any) -> Any:
        raise StoreError("connection refused", outage=True)

    sharded.stores[1].find_messages = refuse  # type: ignore[method-assign]
    status, body = sharded.call("GET", "/admin/v1/messages", "limit=10")
    assert (status, body) == (503, {"error": "shard 1's database is unavailable; try again"})
    store = cast(ShardedStore, sharded.api.store)
    with pytest.raises(StoreError, match="shard 1 did not answer: connection refused"):
        store.find_messages(MessageFilter(), park_attempts=4, limit=10)


def test_readiness_holds_while_one_shard_answers_and_names_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chronos_http, "broker_reachable", lambda _settings: (True, "ok"))
    monkeypatch.setattr(chronos_http, "READY_CACHE_SECONDS", 0.0)
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    stores = [InMemoryStore(clock) for _ in range(3)]

    def away(*_: Any) -> Any:
        raise StoreError("connection refused", outage=True)

    class State:
        node_id, stopping, waiting_for = "n", False, ""

        def warming_loops(self) -> list[str]:
            return []

        def loops_alive(self) -> bool:
            return True

    health = Health(make_settings(), State(), cast(Store, ShardedStore(stores)))
    assert health.ready() == (True, {"node": "n", "postgres": "ok", "kafka": "ok"})
    stores[2].ping = away  # type: ignore[method-assign]
    assert health.ready() == (True, {"node": "n", "postgres": "shards away: 2", "kafka": "ok"})
    stores[0].ping = stores[1].ping = away  # type: ignore[method-assign]
    ok, checks = health.ready()
    assert (ok, checks["postgres"]) == (False, "unavailable")


def test_each_shard_has_its_own_dependency_state_and_gauge_label() -> None:
    assert dependencies.postgres() is dependencies.POSTGRES
    one, two = dependencies.postgres(1), dependencies.postgres(2)
    assert dependencies.postgres(1) is one and one is not two
    assert (one.label, one.name) == ("postgres-1", "Postgres (shard 1)")
