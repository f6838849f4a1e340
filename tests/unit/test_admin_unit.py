"""The admin API, the monitor and the consumer-lag statistics without any service: cursors,
authentication, parameter parsing, routing on the in-memory store, the spec's schemas."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client import REGISTRY

import chronos.admin
from chronos.admin import api as admin
from chronos.admin import params as admin_params
from chronos.admin.api import AdminAPI
from chronos.admin.params import ApiError
from chronos.cluster.monitor import Monitor
from chronos.config.settings import Secret, Settings, load
from chronos.kafka import clients as kafka
from chronos.kafka import consumer_lag
from chronos.kafka.consumer_lag import partition_lags, record_consumer_stats
from chronos.protocol import ScheduledMessage
from chronos.testing import InMemoryStore, ManualClock

TOKEN = "unit-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SPEC = json.loads((Path(chronos.admin.__file__).parent / "openapi.json").read_text())


def make_settings(token: str = TOKEN, **overrides: Any) -> Settings:
    return load(
        environ={},
        database_url=Secret("postgresql://unused/db"),
        admin_token=Secret(token),
        node_id=str(uuid.uuid4()),
        max_publish_attempts=2,
        **overrides,
    )


# ------------------------------------------------------------------------------ cursors


def test_the_leader_is_the_lowest_live_node_id_in_uuid_order() -> None:
    from chronos.store import NodeRecord

    def n(node_id: str, live: bool) -> NodeRecord:
        return NodeRecord(node_id, live, None, None, None, None, None, 0, None)

    low, high = "0fffffff-0000-4000-8000-000000000000", "a0000000-0000-4000-8000-000000000000"
    lowest_dead = "00000000-0000-4000-8000-000000000000"
    assert admin.leader_of([n(high, True), n(low, True), n(lowest_dead, False)]) == low
    assert admin.leader_of([n(lowest_dead, False)]) is None
    assert admin.leader_of([]) is None


# ------------------------------------------------------------------------------ routing


class Harness:
    def __init__(self, token: str = TOKEN) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.store = InMemoryStore(self.clock)
        self.settings = make_settings(token)
        self.api = AdminAPI(self.settings, self.store)

    def call(
        self,
        method: str,
        path: str,
        query: str = "",
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, dict[str, str], Any]:
        """``body``: bytes as sent, None for none, anything else sent as JSON."""
        if body is None:
            raw = b""
        else:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        result = self.api.handle(
            method, path, query, AUTH if headers is None else headers, body=raw
        )
        assert result is not None
        status, ctype, body, extra = result
        assert ctype == "application/json"
        return status, extra, json.loads(body) if body else None

    def seed(self, count: int, *, start: timedelta = timedelta(minutes=5)) -> None:
        base = self.clock.now() + start
        self.store.enqueue(
            [
                ScheduledMessage(f"m{i}", base + timedelta(seconds=i // 2), b"k", b"v", [])
                for i in range(count)
            ],
            0,
        )


def test_other_paths_are_left_to_the_other_routes() -> None:
    h = Harness()
    for path in ("/health/live", "/metrics", "/administrator", "/"):
        assert h.api.handle("GET", path, "", AUTH) is None


def test_without_a_token_every_admin_path_is_a_404_saying_how_to_enable_it() -> None:
    h = Harness(token="")
    for method, path in (
        ("GET", "/admin/v1/stats"),
        ("GET", "/admin/v1/openapi.json"),
        ("DELETE", "/admin/v1/messages/x"),
        ("GET", "/admin"),
    ):
        status, _, body = h.call(method, path)
        assert status == 404
        assert body == {"error": admin.DISABLED_MESSAGE}
    assert h.store.statements == []


def test_auth_comes_before_routing_but_not_for_the_spec() -> None:
    h = Harness()
    for path in ("/admin/v1/stats", "/admin/v1/nowhere", "/admin/v1/messages/m1"):
        status, extra, body = h.call("GET", path, headers={})
        assert status == 401 and "WWW-Authenticate" in extra and body["error"]
    result = h.api.handle("GET", "/admin/v1/openapi.json", "", {})
    assert result is not None and result[0] == 200
    assert json.loads(result[2]) == SPEC
    assert h.call("GET", "/admin/v1/nowhere")[0] == 404
    assert h.store.statements == []


def test_methods_not_served_are_a_405_with_allow() -> None:
    h = Harness()
    for method, path, allow in (
        ("POST", "/admin/v1/messages/x", "GET, DELETE"),
        ("PUT", "/admin/v1/stats", "GET"),
        ("DELETE", "/admin/v1/openapi.json", "GET"),
        ("OPTIONS", "/admin/v1/nodes", "GET"),
    ):
        status, extra, _ = h.call(method, path)
        assert (status, extra["Allow"]) == (405, allow)


def test_get_list_cancel_and_stats_on_the_in_memory_store() -> None:
    h = Harness()
    h.seed(5)
    status, _, body = h.call("GET", "/admin/v1/messages/m1", "include_value=true")
    assert status == 200
    assert (body["state"], body["value"], body["value_size"]) == ("waiting", "dg==", 1)

    ids: list[str] = []
    cursor = ""
    while True:
        status, _, page = h.call("GET", "/admin/v1/messages", f"limit=2{cursor}")
        assert status == 200 and len(page["messages"]) <= 2
        ids += [m["id"] for m in page["messages"]]
        if page["next_cursor"] is None:
            break
        cursor = "&cursor=" + page["next_cursor"]
    assert ids == [f"m{i}" for i in range(5)]

    h.store.claim(str(uuid.uuid4()), 10 * 60 * 1000, 1, 4)  # claims m0
    assert h.call("DELETE", "/admin/v1/messages/m0")[0] == 409
    assert h.call("DELETE", "/admin/v1/messages/m1")[0] == 204
    assert h.call("DELETE", "/admin/v1/messages/m1")[0] == 404
    status, _, stats = h.call("GET", "/admin/v1/stats")
    assert (stats["waiting"], stats["claimed"], stats["parked"]) == (3, 1, 0)
    assert stats["park_attempts"] == 4  # 2 * max_publish_attempts


def test_a_database_error_is_a_503_not_a_crash() -> None:
    h = Harness()
    h.store.fail_next(1, "backlog")
    status, _, body = h.call("GET", "/admin/v1/stats")
    assert status == 503 and body["error"]


# ------------------------------------------------------------------------------ the spec


def _json_schema(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema: $refs inlined, ``nullable`` as a null type."""
    if isinstance(node, dict):
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return _json_schema(SPEC["components"]["schemas"][name])
        out = {k: _json_schema(v) for k, v in node.items() if k != "nullable"}
        if node.get("nullable"):
            out["type"] = [node["type"], "null"]
        return out
    if isinstance(node, list):
        return [_json_schema(v) for v in node]
    return node


def _validate(payload: Any, schema_name: str) -> None:
    schema = _json_schema(copy.deepcopy(SPEC["components"]["schemas"][schema_name]))
    jsonschema.validate(payload, schema, format_checker=jsonschema.FormatChecker())


def test_the_representations_match_the_spec() -> None:
    h = Harness()
    h.store.enqueue(
        [
            ScheduledMessage(
                "a", h.clock.now() + timedelta(minutes=1), None, None, [("h", None), ("h", b"\x00")]
            )
        ],
        0,
    )
    h.seed(3)
    h.store.claim(str(uuid.uuid4()), 10 * 60 * 1000, 1, 4)
    h.store.heartbeat(str(uuid.uuid4()), hostname="host", version="1")
    _validate(h.call("GET", "/admin/v1/messages/a", "include_value=true")[2], "Message")
    _validate(h.call("GET", "/admin/v1/messages")[2], "MessagePage")
    _validate(h.call("GET", "/admin/v1/stats")[2], "Stats")
    _validate(h.call("GET", "/admin/v1/nodes", "include_dead=true")[2], "NodeList")
    _validate(h.call("GET", "/admin/v1/messages", "limit=0")[2], "Error")


def test_every_operation_but_the_spec_requires_the_bearer_token() -> None:
    assert SPEC["security"] == [{"bearerAuth": []}]
    assert SPEC["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    for path, item in SPEC["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            if path == admin.SPEC_PATH:
                assert op["security"] == []
            else:
                assert "security" not in op, (method, path)
                assert "401" in op["responses"], (method, path)


# ------------------------------------------------------------------------------ monitor


def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


def test_the_monitor_beats_publishes_the_backlog_and_leaves() -> None:
    h = Harness()
    h.seed(4)
    h.store.enqueue(
        [ScheduledMessage("late", h.clock.now() + timedelta(seconds=1), None, b"", [])], 0
    )
    h.clock.advance(61_000)  # "late" is now 60 s overdue
    monitor = Monitor(h.settings, h.store)
    assert monitor.beat()
    nodes = h.store.list_nodes(h.settings.liveness_window_ms / 1000)
    assert [n.node_id for n in nodes] == [h.settings.node_id]
    assert nodes[0].version == chronos.__version__
    result = monitor.refresh_backlog()
    assert result is not None
    assert sample("chronos_waiting_messages") == 5
    assert sample("chronos_overdue_messages") == 1
    assert sample("chronos_oldest_overdue_message_age_seconds") == pytest.approx(60)
    monitor.leave()
    assert h.store.list_nodes(h.settings.liveness_window_ms / 1000, include_dead=True) == []


def test_the_monitor_survives_database_errors_and_counts_them() -> None:
    h = Harness()
    monitor = Monitor(h.settings, h.store)
    before = sample("chronos_database_errors_total", {"operation": "heartbeat"}) or 0
    h.store.fail_next(1, "heartbeat")
    assert not monitor.beat()
    h.store.fail_next(1, "backlog")
    assert monitor.refresh_backlog() is None
    assert sample("chronos_database_errors_total", {"operation": "heartbeat"}) == before + 1
    assert monitor.beat()


def test_stopping_a_monitor_that_never_started_touches_nothing() -> None:
    h = Harness()
    Monitor(h.settings, h.store).stop()
    assert h.store.statements == []


# ------------------------------------------------------------------------------ consumer lag


def _stats(partitions: dict[str, dict[str, Any]], topic: str = "in") -> str:
    return json.dumps({"name": "c", "topics": {topic: {"partitions": partitions}}})


def _p(
    lag_stored: int, lag: int = -1, state: str = "active", desired: bool = True
) -> dict[str, Any]:
    return {
        "fetch_state": state,
        "desired": desired,
        "consumer_lag_stored": lag_stored,
        "consumer_lag": lag,
    }


def test_partition_lags_prefer_the_stored_offset_and_skip_unknown_and_unassigned() -> None:
    stats = json.loads(
        _stats(
            {
                "0": _p(5, 9),
                "1": _p(-1, 7),  # nothing stored yet: the committed lag
                "2": _p(-1, -1),  # unknown: left out
                "3": _p(4, 4, state="none", desired=False),  # not assigned to this consumer
                "4": _p(3, 3, state="stopped"),
                "-1": _p(100, 100),  # librdkafka's internal partition
            }
        )
    )
    assert partition_lags(stats) == {("in", "0"): 5, ("in", "1"): 7}
    assert partition_lags({}) == {}


def test_consumer_stats_publish_the_sum_and_drop_revoked_partitions() -> None:
    record_consumer_stats(_stats({"0": _p(5), "1": _p(2)}, topic="lag-test"))
    assert sample("chronos_consumer_lag_messages") == 7
    labels = {"topic": "lag-test", "partition": "1"}
    assert sample("chronos_consumer_partition_lag_messages", labels) == 2
    record_consumer_stats(_stats({"0": _p(1)}, topic="lag-test"))  # partition 1 revoked
    assert sample("chronos_consumer_lag_messages") == 1
    assert sample("chronos_consumer_partition_lag_messages", labels) is None
    record_consumer_stats("not json")  # ignored
    assert sample("chronos_consumer_lag_messages") == 1


def test_the_consumer_reports_statistics_unless_a_passthrough_overrides_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(kafka, "Consumer", lambda conf: seen.append(conf))
    kafka.make_consumer(make_settings(), on_commit=print)
    assert seen[-1]["statistics.interval.ms"] == consumer_lag.CONSUMER_STATS_INTERVAL_MS
    assert seen[-1]["stats_cb"] is record_consumer_stats
    assert seen[-1]["on_commit"] is print
    kafka.make_consumer(make_settings(consumer_properties={"statistics.interval.ms": "0"}))
    assert seen[-1]["statistics.interval.ms"] == "0"


# ------------------------------------------------------------------------------ requeue


def test_requeue_a_parked_message_and_refuse_the_others() -> None:
    h = Harness()  # park_attempts = 4
    me = str(uuid.uuid4())
    h.seed(2)
    h.clock.advance(301_000)  # m0 and m1 are due
    for _ in range(4):
        rows = [r for r in h.store.claim(me, 0, 10, 4) if r.id == "m0"]
        claims = [(r.id, r.readied_at) for r in rows]
        h.store.release(me, claims, failed=True, errors=["refused"], park_attempts=4)
    held = [(c.id, c.readied_at) for c in h.store.claimed() if c.readied_at is not None]
    h.store.release(me, held, failed=False)
    assert h.call("GET", "/admin/v1/messages/m0")[2]["state"] == "parked"
    assert h.call("POST", "/admin/v1/messages/nope/requeue")[0] == 404
    status, _, body = h.call("POST", "/admin/v1/messages/m1/requeue")
    assert status == 409 and "not parked" in body["error"]
    status, _, _ = h.call("POST", "/admin/v1/messages/m0/requeue")
    assert status == 204
    message = h.call("GET", "/admin/v1/messages/m0")[2]
    assert (message["state"], message["attempts"], message["last_error"]) == ("waiting", 0, None)
    assert {r.id for r in h.store.claim(me, 0, 10, 4)} == {"m0", "m1"}


def test_requeue_takes_post_only_and_needs_the_token() -> None:
    h = Harness()
    status, extra, _ = h.call("GET", "/admin/v1/messages/m0/requeue")
    assert (status, extra["Allow"]) == (405, "POST")
    status, extra, _ = h.call("POST", "/admin/v1/messages/m0/requeue", headers={})
    assert status == 401 and "WWW-Authenticate" in extra
    assert h.call("POST", "/admin/v1/messages/m0/requeue", "x=1")[0] == 400
    assert "/admin/v1/messages/{id}/requeue" in SPEC["paths"]


# ------------------------------------------------------------------------------ reschedule


def test_reschedule_moves_a_waiting_message_and_answers_it_as_get_does() -> None:
    h = Harness()
    h.seed(2)
    path = "/admin/v1/messages/m0/reschedule"
    status, _, body = h.call("POST", path, body={"deadline": "2030-02-03T04:05:06.5+01:00"})
    assert status == 200
    assert body == h.call("GET", "/admin/v1/messages/m0")[2]
    assert (body["deadline"], body["state"]) == ("2030-02-03T03:05:06.500000Z", "waiting")
    status, _, body = h.call("POST", path, body={"delay_ms": 90_000})
    assert status == 200
    assert body["deadline"] == "2030-01-01T00:01:30Z"  # from the store's clock
    assert h.call("GET", "/admin/v1/messages/m0", "include_value=true")[2]["value"] == "dg=="


def test_reschedule_refuses_unknown_claimed_and_parked_messages() -> None:
    h = Harness()  # park_attempts = 4
    me = str(uuid.uuid4())
    h.seed(2)
    h.clock.advance(301_000)  # m0 and m1 are due
    for _ in range(4):
        rows = [r for r in h.store.claim(me, 0, 10, 4) if r.id == "m0"]
        h.store.release(me, [(r.id, r.readied_at) for r in rows], failed=True, park_attempts=4)
    when = {"delay_ms": 60_000}
    assert h.call("POST", "/admin/v1/messages/nope/reschedule", body=when)[0] == 404
    status, _, body = h.call("POST", "/admin/v1/messages/m0/reschedule", body=when)
    assert status == 409 and "parked" in body["error"] and "requeue" in body["error"]
    status, _, body = h.call("POST", "/admin/v1/messages/m1/reschedule", body=when)
    assert status == 409 and "claimed" in body["error"]
    assert h.call("GET", "/admin/v1/messages/m1")[2]["state"] == "claimed"


@pytest.mark.parametrize(
    "body",
    [
        None,
        b"not json",
        b"\xff",
        [],
        {},
        {"deadline": "2030-01-01T00:00:00Z", "delay_ms": 5},
        {"deadline": "2030-01-01T00:00:00"},
        {"deadline": "tomorrow"},
        {"deadline": 5},
        {"delay_ms": -1},
        {"delay_ms": 1.5},
        {"delay_ms": True},
        {"delay_ms": "5"},
        {"delay_ms": admin_params.MAX_DELAY_MS + 1},
        {"delay": 5},
        {"delay_ms": 5, "extra": 1},
    ],
)
def test_reschedule_refuses_a_bad_body_with_400(body: Any) -> None:
    h = Harness()
    h.seed(1)
    status, _, answer = h.call("POST", "/admin/v1/messages/m0/reschedule", body=body)
    assert status == 400 and answer["error"]
    assert h.call("GET", "/admin/v1/messages/m0")[2]["deadline"] == "2030-01-01T00:05:00Z"


def test_reschedule_takes_post_only_needs_the_token_and_is_in_the_spec() -> None:
    h = Harness()
    h.seed(1)
    status, extra, _ = h.call("GET", "/admin/v1/messages/m0/reschedule")
    assert (status, extra["Allow"]) == (405, "POST")
    when = {"delay_ms": 1}
    status, extra, _ = h.call("POST", "/admin/v1/messages/m0/reschedule", headers={}, body=when)
    assert status == 401 and "WWW-Authenticate" in extra
    assert h.call("POST", "/admin/v1/messages/m0/reschedule", "x=1", body=when)[0] == 400
    operation = SPEC["paths"]["/admin/v1/messages/{id}/reschedule"]["post"]
    assert set(operation["responses"]) == {"200", "400", "401", "404", "409", "503"}
    assert operation.get("security", SPEC["security"]) == SPEC["security"]


def test_a_body_is_read_by_its_length_and_bounded() -> None:
    class Stream:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, size: int) -> bytes:
            return self.data[:size]

    assert admin_params.read_body({}, Stream(b"ignored")) == b""
    assert admin_params.read_body({"Content-Length": "3"}, Stream(b"abcdef")) == b"abc"
    with pytest.raises(ApiError) as err:
        admin_params.read_body(
            {"Content-Length": str(admin_params.MAX_BODY_BYTES + 1)}, Stream(b"")
        )
    assert err.value.status == 413
    with pytest.raises(ApiError) as err:
        admin_params.read_body({"Content-Length": "-1"}, Stream(b""))
    assert err.value.status == 400
