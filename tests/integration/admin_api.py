"""The admin API over HTTP on a real PostgresStore, for the integration tier: a server started
exactly as a node starts it, requests with the bearer token, and rows seeded in every state (the
``api`` and ``start_api`` fixtures are in conftest.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import psycopg

from chronos.config.settings import Secret, Settings, load
from chronos.config.validation import validate
from chronos.node.http import ChronosHTTPServer, start_http_server
from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore

TOKEN = "s3cret-admin-token"
MAX_ATTEMPTS = 3  # max_publish_attempts: rows park at 6 failed attempts
PARK = 2 * MAX_ATTEMPTS


@dataclass
class FakeState:
    """What chronos.node.http reads of a node: its id, whether it stops, whether its loops run."""

    node_id: str
    stopping: bool = False
    waiting_for: str = ""  # what start-up waits for ("" once the loops run)
    alive: bool = True

    def loops_alive(self) -> bool:
        return self.alive

    def stalled_loops(self) -> list[str]:
        return []

    def warming_loops(self) -> list[str]:  # a running node's loops are warm
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

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.store.close()


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
    return validate(load(environ={}, **values))


def serve(
    database_url: str,
    token: str = TOKEN,
    application_name: str = "chronos-admin-test",
    **overrides: Any,
) -> Api:
    """An HTTP server started as a node starts it, on a PostgresStore of ``database_url``
    (``overrides``: settings)."""
    settings = node_settings(database_url, token, **overrides)
    store = PostgresStore(database_url, application_name=application_name)
    state = FakeState(settings.node_id)
    server = start_http_server(settings, state, store)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return Api(url, settings, store, state, database_url, server)


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
