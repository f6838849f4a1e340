"""The admin API without any service, for the unit tests: settings with a token, an ``AdminAPI``
on the in-memory store and a manual clock, and the spec's schemas as JSON Schema."""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema

import chronos.admin
from chronos.admin.api import AdminAPI
from chronos.config.settings import Secret, Settings, load
from chronos.protocol import ScheduledMessage
from chronos.testing import InMemoryStore, ManualClock
from tests.support.store_contract import msg

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


class AdminHarness:
    """An ``AdminAPI`` on the in-memory store at 2030-01-01 (a manual clock); ``overrides`` are
    settings."""

    def __init__(self, token: str = TOKEN, **overrides: Any) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.store = InMemoryStore(self.clock)
        self.settings = make_settings(token, **overrides)
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

    def park(self, node_id: str, message_id: str) -> None:
        """Fail ``message_id``'s publish until it is parked (park_attempts = 4: twice the
        harness's max_publish_attempts); other due rows ``node_id`` claims meanwhile stay
        claimed."""
        for _ in range(4):
            rows = [r for r in self.store.claim(node_id, 0, 10, 4) if r.id == message_id]
            claims = [(r.id, r.readied_at) for r in rows]
            self.store.release(node_id, claims, failed=True, errors=["refused"], park_attempts=4)

    def seed_tenants(self) -> None:
        """Three tenants, 31 s after the soon rows fell due: "gflood" 2 overdue, "gsmall" 1
        overdue and 1 waiting, "gquiet" 1 waiting."""
        soon, later = self.clock.now() + timedelta(seconds=1), self.clock.now() + timedelta(hours=1)
        rows = {"f1": ("gflood", soon), "f2": ("gflood", soon), "s1": ("gsmall", soon)}
        rows |= {"s2": ("gsmall", later), "q1": ("gquiet", later)}
        self.store.enqueue([msg(i, d) for i, (_, d) in rows.items()], 0)
        for message_id, (tenant, _) in rows.items():
            self.store.set_tenant(message_id, tenant)
        self.clock.advance(31_000)


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


def validate(payload: Any, schema_name: str) -> None:
    """Raise unless ``payload`` is what the spec's schema ``schema_name`` describes."""
    schema = _json_schema(copy.deepcopy(SPEC["components"]["schemas"][schema_name]))
    jsonschema.validate(payload, schema, format_checker=jsonschema.FormatChecker())
