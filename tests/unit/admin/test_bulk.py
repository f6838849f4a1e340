"""POST /admin/v1/bulk/cancel and /bulk/reschedule (chronos.admin.messages.bulk)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from chronos.admin.messages import bulk
from chronos.protocol import ScheduledMessage
from chronos.store import BULK_BATCH
from tests.unit.admin.helpers import SPEC, AdminHarness, validate


def _tenants(h: AdminHarness, acme: int, beta: int = 1) -> None:
    base = h.clock.now() + timedelta(minutes=5)
    h.store.enqueue(
        [
            ScheduledMessage(f"a{i:05}", base + timedelta(seconds=i), b"k", b"v", [], tenant="acme")
            for i in range(acme)
        ]
        + [ScheduledMessage(f"b{i}", base, b"k", b"v", [], tenant="beta") for i in range(beta)],
        0,
    )


def _post(h: AdminHarness, path: str, query: str, body: Any = None) -> tuple[int, Any]:
    status, _, answer = h.call("POST", "/admin/v1/bulk/" + path, query, body=body)
    return status, answer


def test_a_dry_run_counts_and_changes_nothing() -> None:
    h = AdminHarness()
    _tenants(h, 3)
    status, answer = _post(h, "cancel", "tenant=acme&dry_run=true")
    assert status == 200
    validate(answer, "BulkCancel")
    assert (answer["matched"], answer["matched_exact"]) == (3, True)
    assert len(h.call("GET", "/admin/v1/messages")[2]["messages"]) == 4


def test_cancel_by_filter_in_batches_is_logged_and_safe_to_repeat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = AdminHarness()
    _tenants(h, BULK_BATCH + 5)
    caplog.set_level(logging.INFO, logger="chronos.admin.messages.bulk")
    status, answer = _post(h, "cancel", "tenant=acme")
    assert status == 200
    validate(answer, "BulkCancel")
    assert (answer["cancelled"], answer["claimed"], answer["complete"]) == (BULK_BATCH + 5, 0, True)
    assert h.store.statements.count("bulk_cancel") == 2  # one statement per batch
    assert [m["id"] for m in h.call("GET", "/admin/v1/messages")[2]["messages"]] == ["b0"]
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "admin_bulk_cancel"]
    assert (
        "the admin token from -" in record.getMessage() and "tenant='acme'" in record.getMessage()
    )
    assert _post(h, "cancel", "tenant=acme")[1]["cancelled"] == 0


def test_a_cancel_leaves_a_claimed_message_to_fire() -> None:
    h = AdminHarness()
    soon = h.clock.now() + timedelta(milliseconds=500)
    h.store.enqueue([ScheduledMessage("due", soon, b"k", b"v", [], tenant="acme")], 0)
    assert h.store.claim("00000000-0000-0000-0000-000000000001", 1000, 10, 4)
    answer = _post(h, "cancel", "tenant=acme")[1]
    assert (answer["cancelled"], answer["claimed"]) == (0, 1)


def test_a_request_past_its_budget_answers_a_resume_token(monkeypatch: pytest.MonkeyPatch) -> None:
    h = AdminHarness()
    _tenants(h, BULK_BATCH + 5)
    monkeypatch.setattr(bulk, "BULK_BUDGET_S", -1.0)  # stop after the first batch
    first = _post(h, "reschedule", "tenant=acme", {"shift_ms": 60_000})[1]
    assert (first["rescheduled"], first["complete"]) == (BULK_BATCH, False)
    second = _post(h, "reschedule", f"tenant=acme&resume={first['resume']}", {"shift_ms": 60_000})[
        1
    ]
    assert (second["rescheduled"], second["complete"]) == (5, True)
    deadlines = [
        m["deadline"]
        for m in h.call("GET", "/admin/v1/messages", "tenant=acme&limit=2")[2]["messages"]
    ]
    assert deadlines == ["2030-01-01T00:06:00Z", "2030-01-01T00:06:01Z"]  # each moved once


def test_reschedule_to_a_deadline_and_fire_now() -> None:
    h = AdminHarness()
    _tenants(h, 2)
    answer = _post(h, "reschedule", "tenant=acme", {"deadline": "2030-02-01T00:00:00Z"})[1]
    validate(answer, "BulkReschedule")
    assert answer["rescheduled"] == 2
    assert _post(h, "reschedule", "tenant=beta", {"fire_now": True})[1]["rescheduled"] == 1
    assert h.call("GET", "/admin/v1/messages/b0")[2]["deadline"] == "2030-01-01T00:00:00Z"
    dry = _post(h, "reschedule", "tenant=acme&dry_run=true", {"fire_now": True})[1]
    assert dry["matched"] == 2


@pytest.mark.parametrize(
    ("path", "query", "body"),
    [
        ("cancel", "", None),  # no filter: refused, never "everything"
        ("cancel", "state=waiting", None),
        ("cancel", "tenant=a", {"x": 1}),
        ("reschedule", "tenant=a", None),
        ("reschedule", "tenant=a", {"shift_ms": 1, "fire_now": True}),
        ("reschedule", "tenant=a", {"fire_now": False}),
        ("reschedule", "tenant=a&state=parked", {"shift_ms": 1}),
        ("cancel", "tenant=a&resume=bogus", None),
    ],
)
def test_bad_bulk_requests_are_a_400(path: str, query: str, body: Any) -> None:
    status, answer = _post(AdminHarness(), path, query, body)
    assert status == 400 and answer["error"]


def test_bulk_actions_are_posts_in_the_spec() -> None:
    h = AdminHarness()
    status, extra, _ = h.call("GET", "/admin/v1/bulk/cancel", "tenant=a")
    assert (status, extra["Allow"]) == (405, "POST")
    for name in ("cancel", "reschedule"):
        responses = SPEC["paths"][f"/admin/v1/bulk/{name}"]["post"]["responses"]
        assert set(responses) == {"200", "400", "401", "403", "503"}
