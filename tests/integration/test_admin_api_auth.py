"""The admin API over HTTP on the real Postgres: off without a token, the bearer token on every
endpoint but the spec, the methods each path serves (fixtures ``api``, ``start_api``:
conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.admin_api import (
    TOKEN,
    Api,
    message,
    seed,
)

pytestmark = pytest.mark.integration


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
    ("GET", "/admin/v1/whoami", 200),
    ("GET", "/admin/v1/pauses", 200),
    ("GET", "/admin/v1/limits", 200),
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
        "/admin/v1/shards",
        "/admin/v1/whoami",
        "/admin/v1/dead-letters",
        "/admin/v1/dead-letters/replay",
        "/admin/v1/bulk/cancel",
        "/admin/v1/bulk/reschedule",
        "/admin/v1/bulk/delete-tenant",
        "/admin/v1/history/summary",
        "/admin/v1/pauses",
        "/admin/v1/limits",
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
        ("DELETE", "/admin/v1/dead-letters", "GET"),
        ("GET", "/admin/v1/dead-letters/replay", "POST"),
    ):
        status, headers, body = api.request(method, path)
        assert status == 405, (method, path)
        assert headers["Allow"] == allow
        assert body["error"]
