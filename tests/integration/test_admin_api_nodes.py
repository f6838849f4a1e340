"""Nodes, heartbeats and health over HTTP on the real Postgres: the nodes endpoint with the
leader, the monitor's heartbeat, forgotten nodes, readiness while a node fences itself, and no
connection left behind by requests."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chronos.cluster.monitor import Monitor
from chronos.node import http as chronos_http
from tests.integration.admin_api import (
    Api,
    claim,
    message,
    seed,
)

pytestmark = pytest.mark.integration


def test_heartbeat_lists_live_nodes_with_their_claims_and_the_leader(api: Api) -> None:
    me = api.settings.node_id
    peer = str(uuid.uuid4())
    silent = str(uuid.uuid4())
    claims_only = str(uuid.uuid4())
    monitor = Monitor(api.settings, api.store)
    assert monitor.beat()
    api.store.heartbeat(peer, hostname="peer-host", version="9.9")
    api.store.heartbeat(silent, hostname="gone", version="0.0")
    api.sql(
        "UPDATE chronos_nodes SET heartbeat_at = now() - make_interval(secs => %(s)s) "
        "WHERE node_id = %(n)s",
        {"s": api.settings.liveness_window_ms / 1000 + 5, "n": silent},
    )
    seed(api, [message(f"c{i}", datetime.now(UTC) + timedelta(hours=1)) for i in range(3)])
    claim(api, claims_only, ["c0", "c1"])
    claim(api, me, ["c2"])

    status, body = api.get("/admin/v1/nodes")
    assert status == 200
    nodes = {n["node_id"]: n for n in body["nodes"]}
    assert set(nodes) == {me, peer, claims_only}  # the silent node holds nothing: not listed
    assert nodes[me]["live"] and nodes[me]["this_node"] and nodes[me]["claimed"] == 1
    assert nodes[peer]["live"] and nodes[peer]["hostname"] == "peer-host"
    assert nodes[peer]["version"] == "9.9" and not nodes[peer]["this_node"]
    assert not nodes[claims_only]["live"] and nodes[claims_only]["claimed"] == 2
    assert nodes[claims_only]["heartbeat_at"] is None
    leader = str(min(uuid.UUID(me), uuid.UUID(peer)))
    assert body["leader"] == leader
    assert [n["node_id"] for n in body["nodes"] if n["leader"]] == [leader]
    assert body["liveness_window_seconds"] == api.settings.liveness_window_ms / 1000
    assert nodes[me]["heartbeat_age_seconds"] < api.settings.liveness_window_ms / 1000

    status, body = api.get("/admin/v1/nodes?include_dead=true")
    dead = {n["node_id"]: n for n in body["nodes"]}[silent]
    assert not dead["live"] and not dead["leader"] and dead["hostname"] == "gone"
    assert api.get("/admin/v1/nodes?include_dead=maybe")[0] == 400


def test_the_monitor_beats_every_second_and_leaves_at_shutdown(api: Api) -> None:
    monitor = Monitor(api.settings, api.store, heartbeat_interval=0.1, backlog_interval=0.2)
    monitor.start()
    try:
        deadline = time.monotonic() + 5
        beats: set[Any] = set()
        while len(beats) < 3 and time.monotonic() < deadline:
            beats |= {
                r[0]
                for r in api.sql(
                    "SELECT heartbeat_at FROM chronos_nodes WHERE node_id = %(n)s",
                    {"n": api.settings.node_id},
                )
            }
            time.sleep(0.05)
        assert len(beats) >= 3  # the row moves on
        assert api.get("/admin/v1/nodes")[1]["leader"] == api.settings.node_id
    finally:
        monitor.stop()
    assert (
        api.sql("SELECT * FROM chronos_nodes WHERE node_id = %(n)s", {"n": api.settings.node_id})
        == []
    )
    assert api.get("/admin/v1/nodes")[1] == {
        "nodes": [],
        "leader": None,
        "liveness_window_seconds": api.settings.liveness_window_ms / 1000,
        "fired_per_second": 0.0,
    }


def test_nodes_silent_for_an_hour_are_forgotten(api: Api) -> None:
    old, recent = str(uuid.uuid4()), str(uuid.uuid4())
    api.store.heartbeat(old)
    api.store.heartbeat(recent)
    api.sql(
        "UPDATE chronos_nodes SET heartbeat_at = now() - interval '2 hours' WHERE node_id = %(n)s",
        {"n": old},
    )
    assert api.store.expire_nodes(3600) == 1
    assert [r[0] for r in api.sql("SELECT node_id::text FROM chronos_nodes")] == [recent]


# ------------------------------------------------------------------------ health


def test_readiness_is_false_while_the_node_fences_itself(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chronos_http, "broker_reachable", lambda _settings: (True, "ok"))
    monkeypatch.setattr(chronos_http, "READY_CACHE_SECONDS", 0.0)
    status, body = api.get("/health/ready", token=None)
    assert status == 200, body
    assert body["postgres"] == "ok"
    api.state.stopping = True
    status, body = api.get("/health/ready", token=None)
    assert status == 503 and body["node_state"] == "stopping"
    api.state.stopping = False
    api.state.alive = False  # a loop died
    status, body = api.get("/health/ready", token=None)
    assert status == 503 and body["loops"] == "stopped"
    assert api.get("/health/live", token=None)[0] == 503
    api.state.alive = True
    assert api.get("/health/ready", token=None)[0] == 200


def test_requests_do_not_leave_database_connections_behind(api: Api) -> None:
    def connections() -> int:
        rows = api.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'chronos-admin-test'"
        )
        return int(rows[0][0])

    for _ in range(25):
        assert api.get("/admin/v1/stats")[0] == 200
    assert connections() <= 1
