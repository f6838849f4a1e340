"""The admin API's actions over HTTP on the real Postgres: requeue a parked message, reschedule a
waiting one, cancel; and what the claim does with each afterwards."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.admin_api import (
    PARK,
    Api,
    make_overdue,
    message,
    seed,
    seed_states,
)

pytestmark = pytest.mark.integration


# ------------------------------------------------------------------------ requeue


def test_requeue_over_http_and_the_message_is_claimed_again(api: Api) -> None:
    """A parked message can be requeued, not only cancelled."""
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
    """A waiting message gets a new deadline (absolute, or a delay on the
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


def test_cancel_deletes_waiting_and_parked_and_leaves_claimed_to_fire(api: Api) -> None:
    s = seed_states(api)
    assert api.request("DELETE", "/admin/v1/messages/m2")[0] == 204
    assert api.get("/admin/v1/messages/m2")[0] == 404
    assert api.request("DELETE", "/admin/v1/messages/m2")[0] == 404
    assert api.request("DELETE", "/admin/v1/messages/m9")[0] == 204  # parked: cancellable
    status, _, body = api.request("DELETE", "/admin/v1/messages/m7")
    assert status == 202 and (body["id"], body["claimed"]) == ("m7", True), body
    assert "not stopped" in body["detail"]
    assert api.get("/admin/v1/messages/m7")[1]["claimed_by"] == s.claimer  # left to fire
    assert api.request("DELETE", "/admin/v1/messages/" + "x" * 200)[0] == 400
    assert api.request("DELETE", "/admin/v1/messages/m3?force=1")[0] == 400


def test_a_cancelled_message_is_never_claimed(api: Api) -> None:
    seed(api, [message("soon", datetime.now(UTC) + timedelta(milliseconds=300))])
    assert api.request("DELETE", "/admin/v1/messages/soon")[0] == 204
    time.sleep(0.4)
    assert api.store.claim(str(uuid.uuid4()), 1000, 10, PARK) == []
