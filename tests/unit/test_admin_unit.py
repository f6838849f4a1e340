"""The admin API, the monitor and the consumer-lag statistics without any service: cursors,
authentication, parameter parsing, routing on the in-memory store, the spec's schemas."""

from __future__ import annotations

import base64
import copy
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client import REGISTRY

import chronos
from chronos import admin, admin_params, consumer_lag, kafka
from chronos.admin import AdminAPI
from chronos.admin_params import ApiError
from chronos.consumer_lag import partition_lags, record_consumer_stats
from chronos.monitor import Monitor
from chronos.protocol import ScheduledMessage
from chronos.settings import Secret, Settings, load
from chronos.testing import InMemoryStore, ManualClock

TOKEN = "unit-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SPEC = json.loads((Path(chronos.__file__).parent / "openapi.json").read_text())


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


@pytest.mark.parametrize(
    ("deadline", "message_id"),
    [
        (datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "plain"),
        (datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5))), "ünï/cödé?&=#"),
        (datetime(1, 1, 1, tzinfo=UTC), "x" * 128),
        (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), '"quoted"\\'),
    ],
)
def test_a_cursor_round_trips_exactly_and_is_url_safe(deadline: datetime, message_id: str) -> None:
    token = admin_params.encode_cursor(deadline, message_id)
    assert all(c.isalnum() or c in "-_" for c in token)
    assert admin_params.decode_cursor(token) == (deadline, message_id)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "!!!!",
        "A" * 2000,
        "bm90IGpzb24",  # "not json"
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(b'{"v": 2, "d": "2030-01-01T00:00:00Z", "i": "a"}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00", "i": "a"}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "tomorrow", "i": "a"}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00Z", "i": ""}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00Z", "i": 5}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00Z"}').decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_a_cursor_not_made_by_the_api_is_a_400(token: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.decode_cursor(token)
    assert err.value.status == 400


def test_an_altered_cursor_is_refused_or_points_elsewhere_never_crashes() -> None:
    token = admin_params.encode_cursor(datetime(2030, 1, 1, tzinfo=UTC), "abc")
    for i in range(len(token)):
        for replacement in "A_-0":
            altered = token[:i] + replacement + token[i + 1 :]
            try:
                deadline, message_id = admin_params.decode_cursor(altered)
            except ApiError as exc:
                assert exc.status == 400
            else:
                assert deadline.tzinfo is not None and admin_params.valid_id(message_id)


# ------------------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dW5pdC10b2tlbg==",
        "Bearer wrong",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        f"Token {TOKEN}",
        f"Bearer{TOKEN}",
        "Bearer \udcff",
    ],
)
def test_auth_refuses_a_missing_or_wrong_token_with_401(header: str | None) -> None:
    with pytest.raises(ApiError) as err:
        admin.check_auth(header, TOKEN)
    assert err.value.status == 401
    assert err.value.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER  {TOKEN} "])
def test_auth_accepts_the_token_whatever_the_scheme_case(header: str) -> None:
    admin.check_auth(header, TOKEN)


def test_auth_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []

    def compare(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return a == b

    monkeypatch.setattr("chronos.admin.hmac.compare_digest", compare)
    admin.check_auth(f"Bearer {TOKEN}", TOKEN)
    assert calls == [(TOKEN.encode(), TOKEN.encode())]


# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2030-01-02T03:04:05Z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02t03:04:05z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05.123456789+02:00", datetime(2030, 1, 2, 1, 4, 5, 123456, tzinfo=UTC)),
        ("2030-01-02T03:04:05.5-01:30", datetime(2030, 1, 2, 4, 34, 5, 500000, tzinfo=UTC)),
        ("2030-06-30T23:59:60Z", datetime(2030, 6, 30, 23, 59, 59, 999999, tzinfo=UTC)),
        ("0001-01-01T00:00:00+23:59", datetime.min.replace(tzinfo=UTC)),  # clamped
        ("9999-12-31T23:59:59-23:59", datetime.max.replace(tzinfo=UTC)),  # clamped
    ],
)
def test_rfc3339_timestamps_parse_as_utc(raw: str, expected: datetime) -> None:
    assert admin_params.parse_timestamp("deadline_from", raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "yesterday",
        "2030-01-02",  # a date alone
        "2030-01-02T03:04:05",  # no offset
        "2030-01-02 03:04:05Z",
        "20300102T030405Z",
        "2030-13-01T00:00:00Z",
        "2030-02-30T00:00:00Z",
        "2030-01-01T25:00:00Z",
        "2030-01-01T00:00:00+24:00",
        "2030-01-01T00:00:00Z\n",
        "1" * 100,
        "0000-01-01T00:00:00Z",
    ],
)
def test_anything_but_an_rfc3339_instant_is_a_400_naming_the_parameter(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.parse_timestamp("deadline_to", raw)
    assert err.value.status == 400 and "deadline_to" in err.value.message


@pytest.mark.parametrize(("raw", "value"), [(None, False), ("true", True), ("false", False)])
def test_booleans(raw: str | None, value: bool) -> None:
    assert admin_params.parse_bool("include_value", raw) is value


@pytest.mark.parametrize("raw", ["", "1", "0", "True", "yes", "true\n"])
def test_booleans_are_true_or_false_nothing_else(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.parse_bool("include_value", raw)
    assert err.value.status == 400


@pytest.mark.parametrize(("raw", "value"), [(None, 100), ("1", 1), ("1000", 1000), ("050", 50)])
def test_limit(raw: str | None, value: int) -> None:
    assert admin_params.parse_limit(raw) == value


@pytest.mark.parametrize(
    "raw", ["0", "1001", "-1", "+5", " 5", "5\n", "1_0", "1e2", "5.0", "", "x", "99999999"]
)
def test_limit_out_of_range_or_not_an_integer_is_a_400(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.parse_limit(raw)
    assert err.value.status == 400


def test_query_parameters_must_be_known_single_and_decodable() -> None:
    allowed = frozenset({"a", "b"})
    assert admin_params.parse_query("a=1&b=x%20y", allowed) == {"a": "1", "b": "x y"}
    assert admin_params.parse_query("", allowed) == {}
    for bad in ("c=1", "a=1&a=2", "a=%ff", "a=%00"):
        with pytest.raises(ApiError) as err:
            admin_params.parse_query(bad, allowed)
        assert err.value.status == 400, bad


def test_message_ids_are_percent_decoded_and_checked() -> None:
    assert admin_params.parse_message_id("a%2Fb%20%C3%A9") == "a/b é"
    assert admin_params.parse_message_id("x" * 128) == "x" * 128
    for bad in ("x" * 129, "%ff", "a%00"):
        with pytest.raises(ApiError) as err:
            admin_params.parse_message_id(bad)
        assert err.value.status == 400


def test_list_parameters() -> None:
    cursor = admin_params.encode_cursor(datetime(2030, 1, 1, tzinfo=UTC), "m")
    p = admin_params.parse_list_params(
        f"state=parked&deadline_from=2030-01-01T00:00:00Z&limit=7&cursor={cursor}"
    )
    assert (p.state, p.limit, p.deadline_to) == ("parked", 7, None)
    assert p.deadline_from == datetime(2030, 1, 1, tzinfo=UTC)
    assert p.after == (datetime(2030, 1, 1, tzinfo=UTC), "m")
    with pytest.raises(ApiError):
        admin_params.parse_list_params("state=ready")


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
