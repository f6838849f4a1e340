"""The admin API's tokens (chronos.admin.access): the read-only token reads and is refused every
write with 403; every write is logged with its token's name and the client's address."""

from __future__ import annotations

import logging

import pytest

from chronos.config.settings import Secret
from tests.unit.admin.helpers import AdminHarness, validate

READER = {"Authorization": "Bearer read-token"}


def _harness() -> AdminHarness:
    return AdminHarness(admin_read_token=Secret("read-token"))


def test_the_read_only_token_reads() -> None:
    h = _harness()
    h.seed(2)
    for path, query in (
        ("/admin/v1/messages", "tenant="),
        ("/admin/v1/messages/m0", ""),
        ("/admin/v1/stats", ""),
        ("/admin/v1/tenants", ""),
        ("/admin/v1/nodes", ""),
    ):
        assert h.call("GET", path, query, headers=READER)[0] == 200, path


def test_the_read_only_token_counts_what_a_bulk_action_would_change() -> None:
    """A dry run changes nothing: it is a count, which the read-only token may make (the docs
    say it "lists, gets and counts")."""
    h = _harness()
    h.seed(2)
    for action, body in (("cancel", None), ("reschedule", {"fire_now": True})):
        query = "id_prefix=m&dry_run=true"
        status, _, answer = h.call("POST", f"/admin/v1/bulk/{action}", query, READER, body=body)
        assert status == 200 and answer["matched"] == 2, answer
    assert [m["id"] for m in h.call("GET", "/admin/v1/messages")[2]["messages"]] == ["m0", "m1"]


@pytest.mark.parametrize(
    ("method", "path", "query", "body"),
    [
        ("DELETE", "/admin/v1/messages/m0", "", None),
        ("POST", "/admin/v1/messages/m0/requeue", "", None),
        ("POST", "/admin/v1/messages/m0/reschedule", "", {"delay_ms": 1}),
        ("POST", "/admin/v1/bulk/cancel", "id_prefix=m", None),
        ("POST", "/admin/v1/bulk/reschedule", "id_prefix=m", {"fire_now": True}),
    ],
)
def test_the_read_only_token_cannot_write(
    method: str, path: str, query: str, body: object, caplog: pytest.LogCaptureFixture
) -> None:
    h = _harness()
    h.seed(2)
    caplog.set_level(logging.INFO, logger="chronos.admin.api")
    status, _, answer = h.call(method, path, query, headers=READER, body=body)
    assert status == 403 and "read-only" in answer["error"]
    assert [m["id"] for m in h.call("GET", "/admin/v1/messages")[2]["messages"]] == ["m0", "m1"]
    assert any(getattr(r, "event", "") == "admin_write_refused" for r in caplog.records)


def test_only_a_read_token_turns_the_api_on_for_reading_only() -> None:
    h = AdminHarness(token="", admin_read_token=Secret("read-token"))
    h.seed(1)
    assert h.call("GET", "/admin/v1/messages/m0", headers=READER)[0] == 200
    assert h.call("DELETE", "/admin/v1/messages/m0", headers=READER)[0] == 403
    assert h.call("GET", "/admin/v1/stats", headers={"Authorization": "Bearer "})[0] == 401


def test_a_write_is_logged_with_the_token_name_and_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = _harness()
    h.seed(1)
    caplog.set_level(logging.INFO, logger="chronos.admin.messages.api")
    result = h.api.handle(
        "DELETE",
        "/admin/v1/messages/m0",
        "",
        {"Authorization": "Bearer unit-token"},
        client="192.0.2.7",
    )
    assert result is not None and result[0] == 204
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "message_cancelled"]
    assert "the admin token from 192.0.2.7" in record.getMessage()


def test_whoami_names_the_token_and_whether_it_writes() -> None:
    """The console learns which token it holds (and hides the writes a reader cannot make)."""
    h = _harness()
    status, _, answer = h.call("GET", "/admin/v1/whoami", headers=READER)
    assert status == 200 and answer == {"token": "read-only", "can_write": False}
    validate(answer, "Caller")
    status, _, answer = h.call("GET", "/admin/v1/whoami")
    assert status == 200 and answer == {"token": "admin", "can_write": True}
    assert h.call("GET", "/admin/v1/whoami", headers={"Authorization": "Bearer x"})[0] == 401
    assert h.call("POST", "/admin/v1/whoami")[0] == 405
