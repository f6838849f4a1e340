"""The admin API, the health endpoints, the backlog gauges and the node heartbeats against the
real Postgres: an HTTP server started exactly as a node starts it, on a real PostgresStore."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from prometheus_client import REGISTRY
from psycopg import ClientCursor
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

import chronos.admin
from chronos.cluster.monitor import Monitor
from chronos.config.settings import Secret, Settings, load
from chronos.node import http as chronos_http
from chronos.node.http import ChronosHTTPServer, start_http_server
from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore, migrate
from chronos.store.sql import query
from tests.support import DatabaseFactory

pytestmark = pytest.mark.integration

TOKEN = "s3cret-admin-token"
MAX_ATTEMPTS = 3  # max_publish_attempts: rows park at 6 failed attempts
PARK = 2 * MAX_ATTEMPTS


@dataclass
class FakeState:
    """What chronos.node.http reads of a node: its id, whether it stops, whether its loops run."""

    node_id: str
    stopping: bool = False
    alive: bool = True

    def loops_alive(self) -> bool:
        return self.alive

    def stalled_loops(self) -> list[str]:
        return []


@dataclass
class Api:
    url: str
    settings: Settings
    store: PostgresStore
    state: FakeState
    database_url: str
    server: ChronosHTTPServer

    def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> tuple[int, dict[str, str], Any]:
        """``body``: sent as JSON unless None (bytes are sent as they are)."""
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            all_headers.setdefault("Content-Type", "application/json")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, raw, got = resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            status, raw, got = exc.code, exc.read(), dict(exc.headers)
        ctype = got.get("Content-Type", "")
        body = json.loads(raw) if raw and ctype.startswith("application/json") else raw
        return status, got, body

    def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, _, body = self.request("GET", path, **kwargs)
        return status, body

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []


def node_settings(database_url: str, token: str = TOKEN, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": Secret(database_url),
        "http_host": "127.0.0.1",
        "http_port": 0,
        "admin_token": Secret(token),
        "max_publish_attempts": MAX_ATTEMPTS,
        "node_id": str(uuid.uuid4()),
    }
    values.update(overrides)
    return load(environ={}, **values).validate()


@pytest.fixture
def start_api() -> Iterator[Callable[..., Api]]:
    started: list[Api] = []

    def start(database_url: str, token: str = TOKEN) -> Api:
        settings_ = node_settings(database_url, token)
        store = PostgresStore(database_url, application_name="chronos-admin-test")
        state = FakeState(settings_.node_id)
        server = start_http_server(settings_, state, store)
        api = Api(
            f"http://127.0.0.1:{server.server_address[1]}",
            settings_,
            store,
            state,
            database_url,
            server,
        )
        started.append(api)
        return api

    yield start
    for api in started:
        api.server.shutdown()
        api.server.server_close()
        api.store.close()


@pytest.fixture
def api(migrated_database_url: str, start_api: Callable[..., Api]) -> Api:
    return start_api(migrated_database_url)


# -------------------------------------------------------------------------------- seeding


def message(
    message_id: str,
    deadline: datetime,
    *,
    key: bytes | None = b"k",
    value: bytes | None = b"value",
    headers: list[tuple[str, bytes | None]] | None = None,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, key, value, headers or [])


def seed(api: Api, messages: list[ScheduledMessage]) -> None:
    api.store.enqueue(messages, 0)


def make_overdue(api: Api, ids: list[str], seconds: float) -> None:
    api.sql(
        "UPDATE chronos_messages SET deadline = now() - make_interval(secs => %(s)s) "
        "WHERE id = ANY(%(ids)s)",
        {"s": seconds, "ids": ids},
    )


def park(api: Api, ids: list[str], attempts: int = PARK) -> None:
    api.sql(
        "UPDATE chronos_messages SET attempts = %(a)s, last_error = 'MSG_SIZE_TOO_LARGE' "
        "WHERE id = ANY(%(ids)s)",
        {"a": attempts, "ids": ids},
    )


def claim(api: Api, node: str, ids: list[str]) -> None:
    api.sql(
        "UPDATE chronos_messages SET readied_at = now(), readied_by = %(n)s::uuid "
        "WHERE id = ANY(%(ids)s)",
        {"n": node, "ids": ids},
    )


@dataclass
class Seeded:
    waiting: list[str]
    claimed: list[str]
    parked: list[str]
    overdue: list[str]
    claimer: str


def seed_states(api: Api) -> Seeded:
    """7 waiting (2 of them overdue), 2 claimed, 2 parked (1 overdue)."""
    base = datetime.now(UTC) + timedelta(hours=1)
    seed(api, [message(f"m{i}", base + timedelta(minutes=i)) for i in range(11)])
    claimer = str(uuid.uuid4())
    claim(api, claimer, ["m7", "m8"])
    park(api, ["m9", "m10"])
    make_overdue(api, ["m0"], 120)
    make_overdue(api, ["m1"], 30)
    make_overdue(api, ["m9"], 600)  # parked rows never count as overdue
    return Seeded(
        waiting=[f"m{i}" for i in range(7)],
        claimed=["m7", "m8"],
        parked=["m9", "m10"],
        overdue=["m0", "m1"],
        claimer=claimer,
    )


# ------------------------------------------------------------------------ off / auth


def test_the_admin_api_is_off_without_a_token(
    migrated_database_url: str, start_api: Callable[..., Api]
) -> None:
    api = start_api(migrated_database_url, token="")
    for path in ("/admin/v1/stats", "/admin/v1/messages", "/admin/v1/openapi.json", "/admin/x"):
        status, body = api.get(path)
        assert status == 404, path
        assert "disabled" in body["error"] and "CHRONOS_ADMIN_TOKEN" in body["error"]
        status, body = api.get(path, token="")  # an empty token opens nothing either
        assert status == 404
    status, _, _ = api.request("DELETE", "/admin/v1/messages/x")
    assert status == 404
    assert api.get("/health/live", token=None)[0] == 200
    assert api.get("/metrics", token=None)[0] == 200


ENDPOINTS = [
    ("GET", "/admin/v1/messages", 200),
    ("GET", "/admin/v1/messages/m1", 200),
    ("GET", "/admin/v1/messages/absent", 404),
    ("DELETE", "/admin/v1/messages/m2", 204),
    ("POST", "/admin/v1/messages/m0/requeue", 409),  # waiting: authorised, nothing to requeue
    ("POST", "/admin/v1/messages/m0/reschedule", 200),
    ("GET", "/admin/v1/stats", 200),
    ("GET", "/admin/v1/nodes", 200),
    ("GET", "/admin/v1/tenants", 200),
]


@pytest.mark.parametrize(("method", "path", "ok_status"), ENDPOINTS)
def test_every_endpoint_refuses_a_missing_or_wrong_token(
    api: Api, method: str, path: str, ok_status: int
) -> None:
    seed(api, [message(f"m{i}", datetime.now(UTC) + timedelta(hours=1)) for i in range(3)])
    body_ = {"delay_ms": 7_200_000} if path.endswith("/reschedule") else None
    for token in (None, "", "wrong", TOKEN + "x", TOKEN[:-1]):
        status, headers, body = api.request(method, path, token=token, body=body_)
        assert status == 401, (token, status, body)
        assert body["error"]
        assert headers["WWW-Authenticate"].startswith("Bearer")
    status, _, body = api.request(
        method, path, headers={"Authorization": f"Basic {TOKEN}"}, token=None, body=body_
    )
    assert status == 401
    status, _, body = api.request(method, path, body=body_)
    assert status == ok_status, body
    # The scheme is case-insensitive.
    status, _, _ = api.request(
        method, path, token=None, headers={"Authorization": f"bearer {TOKEN}"}, body=body_
    )
    assert status in (ok_status, 404)  # the DELETE already happened


def test_the_spec_needs_no_token_and_health_and_metrics_need_none(api: Api) -> None:
    status, body = api.get("/admin/v1/openapi.json", token=None)
    assert status == 200
    assert body["openapi"].startswith("3.")
    assert set(body["paths"]) == {
        "/admin/v1/openapi.json",
        "/admin/v1/messages",
        "/admin/v1/messages/{id}",
        "/admin/v1/messages/{id}/requeue",
        "/admin/v1/messages/{id}/reschedule",
        "/admin/v1/stats",
        "/admin/v1/nodes",
        "/admin/v1/tenants",
    }
    for path in ("/health/live", "/metrics"):
        assert api.get(path, token=None)[0] == 200


def test_methods_not_served_answer_405_with_allow(api: Api) -> None:
    for method, path, allow in (
        ("POST", "/admin/v1/messages", "GET"),
        ("PUT", "/admin/v1/messages/x", "GET, DELETE"),
        ("PATCH", "/admin/v1/stats", "GET"),
        ("GET", "/admin/v1/messages/x/reschedule", "POST"),
        ("DELETE", "/admin/v1/nodes", "GET"),
    ):
        status, headers, body = api.request(method, path)
        assert status == 405, (method, path)
        assert headers["Allow"] == allow
        assert body["error"]


# ------------------------------------------------------------------------ messages


def test_get_message_shows_state_bytes_and_headers(api: Api) -> None:
    deadline = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    headers = [("trace", b"\x00\xffbin"), ("empty", None), ("trace", b"second")]
    odd_id = "tenant/a b?c#d%é"
    seed(
        api,
        [
            message("m1", deadline, key=b"\x01key", value=b"\x00" * 1000, headers=headers),
            message("tomb", deadline, key=None, value=None),
            message(odd_id, deadline),
        ],
    )
    status, body = api.get("/admin/v1/messages/m1")
    assert status == 200
    assert body == {
        "id": "m1",
        "state": "waiting",
        "deadline": "2031-05-06T07:08:09.123456Z",
        "readied_at": None,
        "claimed_by": None,
        "attempts": 0,
        "last_error": None,
        "target_topic": None,
        "enqueued_at": body["enqueued_at"],
        "key": base64.b64encode(b"\x01key").decode(),
        "headers": [
            {"name": "trace", "value": base64.b64encode(b"\x00\xffbin").decode()},
            {"name": "empty", "value": None},
            {"name": "trace", "value": base64.b64encode(b"second").decode()},
        ],
        "value_size": 1000,
    }
    status, body = api.get("/admin/v1/messages/m1?include_value=true")
    assert base64.b64decode(body["value"]) == b"\x00" * 1000
    status, body = api.get("/admin/v1/messages/tomb?include_value=true")
    assert (body["key"], body["value"], body["value_size"]) == (None, None, None)
    status, body = api.get("/admin/v1/messages/" + quote(odd_id, safe=""))
    assert status == 200 and body["id"] == odd_id

    status, body = api.get("/admin/v1/messages/absent")
    assert status == 404 and "absent" in body["error"]
    for bad in ("x" * 129, "a%00b", "%ff%fe"):
        status, body = api.get("/admin/v1/messages/" + bad)
        assert status == 400, bad
    for bad_query in (
        "include_value=yes",
        "include_value=1",
        "include_valu=true",
        "include_value=1&include_value=0",
    ):
        assert api.get("/admin/v1/messages/m1?" + bad_query)[0] == 400


def test_message_states_waiting_claimed_parked(api: Api) -> None:
    s = seed_states(api)
    for ids, state in ((s.waiting, "waiting"), (s.claimed, "claimed"), (s.parked, "parked")):
        for message_id in ids:
            status, body = api.get(f"/admin/v1/messages/{message_id}")
            assert status == 200
            assert body["state"] == state, message_id
    _, claimed = api.get("/admin/v1/messages/m7")
    assert claimed["claimed_by"] == s.claimer and claimed["readied_at"] is not None
    _, parked = api.get("/admin/v1/messages/m9")
    assert (parked["attempts"], parked["last_error"]) == (PARK, "MSG_SIZE_TOO_LARGE")


def list_all(api: Api, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Follow next_cursor to the end."""
    seen: list[dict[str, Any]] = []
    cursor = None
    for _ in range(1000):
        page_params = dict(params, **({"cursor": cursor} if cursor else {}))
        status, body = api.get("/admin/v1/messages?" + urlencode(page_params))
        assert status == 200, body
        assert len(body["messages"]) <= int(params.get("limit", 100))
        seen += body["messages"]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("pagination did not end")


def test_list_pages_by_deadline_then_id_without_gaps_or_repeats(api: Api) -> None:
    base = datetime.now(UTC) + timedelta(hours=2)
    # 3 deadlines shared by several ids each: ties must page by id.
    ids = [f"p{i:02d}" for i in range(23)]
    seed(api, [message(i, base + timedelta(seconds=n % 3)) for n, i in enumerate(ids)])
    claim(api, str(uuid.uuid4()), ["p04", "p05"])
    expected = sorted(
        ((base + timedelta(seconds=n % 3), i) for n, i in enumerate(ids)),
    )
    for limit in (1, 2, 5, 7, 1000):
        got = list_all(api, {"limit": limit})
        assert [m["id"] for m in got] == [i for _, i in expected], limit
    waiting = list_all(api, {"state": "waiting", "limit": 4})
    assert {m["id"] for m in waiting} == set(ids) - {"p04", "p05"}
    claimed = list_all(api, {"state": "claimed", "limit": 1})
    assert [m["id"] for m in claimed] == sorted(
        ["p04", "p05"], key=lambda i: (base + timedelta(seconds=ids.index(i) % 3), i)
    )
    assert all("value" not in m and m["value_size"] == 5 for m in got)

    start, end = base + timedelta(seconds=1), base + timedelta(seconds=2)
    ranged = list_all(
        api, {"deadline_from": start.isoformat(), "deadline_to": end.isoformat(), "limit": 3}
    )
    assert {m["id"] for m in ranged} == {i for n, i in enumerate(ids) if n % 3 == 1}
    # Any offset; an instant without one is refused rather than guessed.
    shifted = start.astimezone(timezone(timedelta(hours=-3))).isoformat()
    zulu = end.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert {m["id"] for m in list_all(api, {"deadline_from": shifted, "deadline_to": zulu})} == {
        m["id"] for m in ranged
    }
    naive = start.replace(tzinfo=None).isoformat()
    assert api.get("/admin/v1/messages?" + urlencode({"deadline_from": naive}))[0] == 400


def test_list_filters_parked(api: Api) -> None:
    s = seed_states(api)
    parked = list_all(api, {"state": "parked", "limit": 1})
    assert [m["id"] for m in parked] == s.parked
    assert all(m["state"] == "parked" for m in parked)
    everything = list_all(api, {})
    assert len(everything) == 11
    assert {m["id"]: m["state"] for m in everything}["m10"] == "parked"


@pytest.mark.parametrize(
    "bad",
    [
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=-1",
        "limit=1.5",
        "limit=",
        "limit=1_0",
        "state=ready",
        "state=",
        "deadline_from=yesterday",
        "deadline_from=2026-01-01",
        "deadline_to=2026-01-01T00:00:00",
        "deadline_to=2026-13-01T00:00:00Z",
        "deadline_from=",
        "cursor=garbage",
        "cursor=",
        "cursor=" + "A" * 2000,
        "cursor=" + base64.urlsafe_b64encode(b'{"v":1,"d":"x","i":"y"}').decode(),
        "cursor="
        + base64.urlsafe_b64encode(b'{"v":2,"d":"2026-01-01T00:00:00Z","i":"y"}').decode(),
        "unknown=1",
        "limit=1&limit=2",
    ],
)
def test_list_rejects_bad_parameters(api: Api, bad: str) -> None:
    status, body = api.get("/admin/v1/messages?" + bad)
    assert status == 400, bad
    assert body["error"]


# ------------------------------------------------------------------------ requeue


def test_requeue_over_http_and_the_message_is_claimed_again(api: Api) -> None:
    """Issue 8, item 6: a parked message can be requeued, not only cancelled."""
    due = datetime.now(UTC) + timedelta(seconds=1)
    seed(api, [message("bad", due), message("ok", due + timedelta(hours=1))])
    make_overdue(api, ["bad"], 5)
    me = str(uuid.uuid4())
    for _ in range(PARK):  # refused PARK times: parked through the store, as firing does
        rows = api.store.claim(me, 0, 10, PARK)
        assert [r.id for r in rows] == ["bad"]
        api.store.release(
            me,
            [(r.id, r.readied_at) for r in rows],
            failed=True,
            errors=["refused"],
            park_attempts=PARK,
        )
    assert api.get("/admin/v1/messages/bad")[1]["state"] == "parked"
    assert api.store.claim(me, 0, 10, PARK) == []
    assert api.request("POST", "/admin/v1/messages/nope/requeue")[0] == 404
    status, _, body = api.request("POST", "/admin/v1/messages/ok/requeue")
    assert status == 409 and "not parked" in body["error"]
    assert api.request("POST", "/admin/v1/messages/bad/requeue", token=None)[0] == 401
    assert api.request("POST", "/admin/v1/messages/bad/requeue")[0] == 204
    _, requeued = api.get("/admin/v1/messages/bad")
    assert (requeued["state"], requeued["attempts"], requeued["last_error"]) == ("waiting", 0, None)
    assert [r.id for r in api.store.claim(me, 0, 10, PARK)] == ["bad"]  # due: claimed at once


# ------------------------------------------------------------------------ reschedule


def test_reschedule_over_http_moves_a_waiting_message_and_refuses_the_others(api: Api) -> None:
    """Issue 12, item 5: a waiting message gets a new deadline (absolute, or a delay on the
    database clock) and keeps its payload; claimed and parked ones answer 409, unknown 404."""
    s = seed_states(api)
    path = "/admin/v1/messages/m3/reschedule"
    status, _, body = api.request("POST", path, body={"deadline": "2031-05-06T09:08:09.123+02:00"})
    assert status == 200, body
    assert body == api.get("/admin/v1/messages/m3")[1]
    assert (body["deadline"], body["state"]) == ("2031-05-06T07:08:09.123000Z", "waiting")
    (db_now,) = api.sql("SELECT now()")[0]
    status, _, body = api.request("POST", path, body={"delay_ms": 7_200_000})
    assert status == 200
    moved = datetime.fromisoformat(body["deadline"]) - db_now
    assert timedelta(hours=2) <= moved < timedelta(hours=2, seconds=30)
    assert api.get("/admin/v1/messages/m3?include_value=true")[1]["value"] == "dmFsdWU="
    assert api.request("POST", "/admin/v1/messages/nope/reschedule", body={"delay_ms": 1})[0] == 404
    for claimed in s.claimed:
        status, _, body = api.request(
            "POST", f"/admin/v1/messages/{claimed}/reschedule", body={"delay_ms": 1}
        )
        assert status == 409 and "claimed" in body["error"]
    status, _, body = api.request(
        "POST", f"/admin/v1/messages/{s.parked[0]}/reschedule", body={"delay_ms": 1}
    )
    assert status == 409 and "requeue" in body["error"]
    for bad in (b"", b"{", {"delay_ms": 1, "deadline": "2031-01-01T00:00:00Z"}, {"delay_ms": -5}):
        assert api.request("POST", path, body=bad)[0] == 400, bad
    assert api.request("POST", path, body=b"x" * 5000)[0] == 413


def test_a_message_rescheduled_to_now_is_claimed_at_once(api: Api) -> None:
    seed(api, [message("later", datetime.now(UTC) + timedelta(hours=1))])
    me = str(uuid.uuid4())
    assert api.store.claim(me, 1000, 10, PARK) == []
    status, _, _ = api.request("POST", "/admin/v1/messages/later/reschedule", body={"delay_ms": 0})
    assert status == 200
    assert [r.id for r in api.store.claim(me, 1000, 10, PARK)] == ["later"]


# ------------------------------------------------------------------------ cancel


def test_cancel_deletes_waiting_and_parked_refuses_claimed(api: Api) -> None:
    s = seed_states(api)
    assert api.request("DELETE", "/admin/v1/messages/m2")[0] == 204
    assert api.get("/admin/v1/messages/m2")[0] == 404
    assert api.request("DELETE", "/admin/v1/messages/m2")[0] == 404
    assert api.request("DELETE", "/admin/v1/messages/m9")[0] == 204  # parked: cancellable
    status, _, body = api.request("DELETE", "/admin/v1/messages/m7")
    assert status == 409 and "claimed" in body["error"]
    assert api.get("/admin/v1/messages/m7")[1]["claimed_by"] == s.claimer
    assert api.request("DELETE", "/admin/v1/messages/" + "x" * 200)[0] == 400
    assert api.request("DELETE", "/admin/v1/messages/m3?force=1")[0] == 400


def test_a_cancelled_message_is_never_claimed(api: Api) -> None:
    seed(api, [message("soon", datetime.now(UTC) + timedelta(milliseconds=300))])
    assert api.request("DELETE", "/admin/v1/messages/soon")[0] == 204
    time.sleep(0.4)
    assert api.store.claim(str(uuid.uuid4()), 1000, 10, PARK) == []


# ------------------------------------------------------------------------ stats and gauges


def test_stats_counts_states_overdue_and_deadlines(api: Api) -> None:
    seed_states(api)
    status, body = api.get("/admin/v1/stats")
    assert status == 200
    assert (body["waiting"], body["claimed"], body["parked"], body["overdue"]) == (7, 2, 2, 2)
    assert body["waiting_exact"] and body["parked_exact"] and body["overdue_exact"]
    assert 119 <= body["oldest_overdue_age_seconds"] < 180
    assert body["park_attempts"] == PARK
    oldest = datetime.fromisoformat(body["oldest_deadline"])
    newest = datetime.fromisoformat(body["newest_deadline"])
    now = datetime.fromisoformat(body["database_time"])
    assert now - timedelta(minutes=11) < oldest < now - timedelta(minutes=9)  # m9, parked
    assert newest > now + timedelta(minutes=69)  # m10
    assert api.get("/admin/v1/stats?x=1")[0] == 400


def test_stats_of_an_empty_table(api: Api) -> None:
    status, body = api.get("/admin/v1/stats")
    assert status == 200
    assert (body["waiting"], body["claimed"], body["parked"], body["overdue"]) == (0, 0, 0, 0)
    assert body["oldest_overdue_age_seconds"] == 0
    assert body["oldest_deadline"] is None and body["newest_deadline"] is None


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


def test_backlog_gauges_on_seeded_data(api: Api) -> None:
    seed_states(api)
    backlog = Monitor(api.settings, api.store).refresh_backlog()
    assert backlog is not None
    assert gauge("chronos_waiting_messages") == 7
    assert gauge("chronos_claimed_messages") == 2
    assert gauge("chronos_parked_messages") == 2
    assert gauge("chronos_overdue_messages") == 2
    assert gauge("chronos_backlog_exact") == 1
    age = gauge("chronos_oldest_overdue_message_age_seconds")
    assert age is not None and 119 <= age < 180
    assert abs((gauge("chronos_backlog_last_success_timestamp_seconds") or 0) - time.time()) < 60
    # The same numbers on the metrics endpoint.
    status, text = api.get("/metrics", token=None)
    assert b"chronos_waiting_messages 7.0" in text
    # Nothing overdue: the age is 0.
    api.sql("DELETE FROM chronos_messages WHERE id IN ('m0', 'm1')")
    Monitor(api.settings, api.store).refresh_backlog()
    assert gauge("chronos_oldest_overdue_message_age_seconds") == 0
    assert gauge("chronos_overdue_messages") == 0


def test_the_waiting_count_is_an_estimate_above_the_exact_threshold(api: Api) -> None:
    base = datetime.now(UTC) + timedelta(hours=1)
    seed(api, [message(f"e{i}", base + timedelta(seconds=i)) for i in range(300)])
    api.sql("ANALYZE chronos_messages")
    exact = api.store.backlog(PARK, exact_below=1000, count_limit=50)
    assert (exact.unclaimed, exact.unclaimed_exact) == (300, True)
    estimated = api.store.backlog(PARK, exact_below=100, count_limit=50)
    assert not estimated.unclaimed_exact
    assert 100 <= estimated.unclaimed <= 600  # the planner's estimate, at least the bound
    make_overdue(api, [f"e{i}" for i in range(80)], 10)
    capped = api.store.backlog(PARK, exact_below=1000, count_limit=50)
    assert (capped.overdue, capped.overdue_capped) == (50, True)


def test_tenants_over_http_and_the_leaders_tenant_gauges(api: Api) -> None:
    """Per tenant: waiting, overdue, claimed, parked; NULL (rows before tenants) is ''."""
    seeded = seed_states(api)
    api.sql("UPDATE chronos_messages SET tenant = 'acme' WHERE id IN ('m0', 'm1', 'm2', 'm7')")
    api.sql("UPDATE chronos_messages SET tenant = 'zeta' WHERE id IN ('m3', 'm9')")
    api.sql("UPDATE chronos_messages SET tenant = NULL WHERE id IN ('m4', 'm5', 'm6', 'm8')")
    status, body = api.get("/admin/v1/tenants?limit=10")
    assert status == 200 and body["tenants_complete"] and body["limit"] == 10
    rows = {t["tenant"]: t for t in body["tenants"]}
    assert [t["tenant"] for t in body["tenants"]] == ["acme", "", "zeta"]
    counts = {k: (v["waiting"], v["overdue"], v["claimed"], v["parked"]) for k, v in rows.items()}
    # m10 is parked with the default tenant ''; m9 (parked, overdue) never counts as overdue.
    assert counts == {"acme": (3, 2, 1, 0), "": (3, 0, 1, 1), "zeta": (1, 0, 0, 1)}
    assert 119 <= rows["acme"]["oldest_overdue_age_seconds"] < 180
    assert rows[""]["oldest_overdue_age_seconds"] == 0
    assert [t["tenant"] for t in api.get("/admin/v1/tenants?limit=1")[1]["tenants"]] == ["acme"]
    assert api.get("/admin/v1/tenants?limit=0")[0] == 400
    assert len(seeded.claimed) == 2

    monitor = Monitor(api.settings, api.store)
    assert monitor.refresh_tenants() is not None
    assert REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "acme"}) == 2
    age = REGISTRY.get_sample_value(
        "chronos_tenant_oldest_overdue_message_age_seconds", {"tenant": "acme"}
    )
    assert age is not None and 119 <= age < 180
    assert REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "zeta"}) is None
    monitor.tenant_gauges.clear()


def _plan(database_url: str, name: str, params: dict[str, Any]) -> str:
    with psycopg.connect(database_url, autocommit=True, cursor_factory=ClientCursor) as conn:
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + query(name), params).fetchall()
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("backlog", {"park_attempts": PARK, "exact_below": 100_000, "count_limit": 10_000}),
        *[
            (
                name,
                {
                    "park_attempts": PARK,
                    "limit": 101,
                    "deadline_from": None,
                    "deadline_to": None,
                    "after_deadline": datetime.now(UTC),
                    "after_id": "x",
                },
            )
            for name in ("list_waiting", "list_parked", "list_claimed", "list_all")
        ],
    ],
)
def test_backlog_and_list_queries_never_scan_the_table(
    api: Api, name: str, params: dict[str, Any]
) -> None:
    """With sequential scans priced out, every part of these statements has an index path: none
    reads the whole table (on millions of rows the planner picks the same index paths)."""
    seed_states(api)
    api.sql("ANALYZE chronos_messages")
    plan = _plan(api.database_url, name, params)
    assert "Seq Scan on chronos_messages" not in plan, plan


# ------------------------------------------------------------------------ nodes and heartbeats


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


# ------------------------------------------------------------------------ migration 0002


def _tables_and_indexes(url: str) -> tuple[set[str], set[str]]:
    with psycopg.connect(url) as conn:
        tables = {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        indexes = {
            r[0]
            for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
        }
    return tables, indexes


def test_migration_0002_upgrades_and_downgrades_keeping_messages(database_url: str) -> None:
    migrate.upgrade(database_url, "0001")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, attempts) "
            "VALUES ('keep', now() + interval '1 day', 3)"
        )
    migrate.upgrade(database_url, "0002")
    tables, indexes = _tables_and_indexes(database_url)
    assert "chronos_nodes" in tables
    assert "chronos_messages_failed_idx" in indexes
    with psycopg.connect(database_url) as conn:
        (valid,) = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = "
            "'chronos_messages_failed_idx'::regclass"
        ).fetchone() or (False,)
    assert valid
    migrate.downgrade(database_url, "0001")
    tables, indexes = _tables_and_indexes(database_url)
    assert "chronos_nodes" not in tables and "chronos_messages_failed_idx" not in indexes
    assert "chronos_messages" in tables
    migrate.upgrade(database_url)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT id FROM chronos_messages").fetchall() == [("keep",)]
    migrate.downgrade(database_url)
    assert _tables_and_indexes(database_url)[0] <= {"alembic_version"}


# ------------------------------------------------------------------------ the spec, fuzzed


@pytest.fixture(scope="module")
def fuzzed_api(database_factory: DatabaseFactory) -> Iterator[Api]:
    """One server for every generated case, on a database seeded with every state."""
    url = database_factory.create_migrated()
    settings_ = node_settings(url)
    store = PostgresStore(url, application_name="chronos-admin-fuzz")
    state = FakeState(settings_.node_id)
    server = start_http_server(settings_, state, store)
    api = Api(f"http://127.0.0.1:{server.server_address[1]}", settings_, store, state, url, server)
    seed_states(api)
    store.heartbeat(settings_.node_id, hostname="fuzz", version="1")
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        store.close()
        database_factory.drop(url)


# The spec as shipped (the served copy is the same bytes: see the test below). Loading it from
# the file rather than the server lets the cases be generated before any fixture runs.
SPEC_FILE = Path(chronos.admin.__file__).parent / "openapi.json"
schema = schemathesis.openapi.from_path(SPEC_FILE)


def test_the_served_spec_is_the_shipped_file(api: Api) -> None:
    req = urllib.request.Request(api.url + "/admin/v1/openapi.json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.read() == SPEC_FILE.read_bytes()


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_conforms_to_its_spec(case: Any, fuzzed_api: Api) -> None:
    excluded = []
    if "cursor" in (case.query or {}):
        # A cursor is opaque: the spec cannot say which strings are valid ones, and any other
        # string is rightly refused with 400.
        excluded.append(positive_data_acceptance)
    if any(value is None for value in (case.query or {}).values()):
        # The HTTP client leaves a query parameter whose value is None out of the request, so
        # the request sent is not the schema-violating one generated (an unknown parameter
        # with no value is sent as nothing): it cannot be expected to be refused.
        excluded.append(negative_data_rejection)
    case.call_and_validate(
        base_url=fuzzed_api.url,
        headers={"Authorization": f"Bearer {TOKEN}"},
        excluded_checks=excluded,
        timeout=10,
    )
