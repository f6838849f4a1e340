"""The admin API without any service (chronos.admin.api): routing on the in-memory store,
authentication, the spec's schemas, requeue, reschedule and the per-tenant backlog."""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from datetime import timedelta
from typing import Any

import pytest

from chronos.admin import api as admin
from chronos.admin import params as admin_params
from chronos.admin.params import ApiError
from chronos.protocol import ScheduledMessage
from chronos.recurrence import Rule
from tests.unit.admin.helpers import AUTH, SPEC, AdminHarness, validate

# ------------------------------------------------------------------------------ the leader


def test_the_leader_is_the_lowest_live_node_id_in_uuid_order() -> None:
    from chronos.store import NodeRecord

    def n(node_id: str, live: bool) -> NodeRecord:
        return NodeRecord(node_id, live, None, None, None, None, None, 0, None)

    low, high = "0fffffff-0000-4000-8000-000000000000", "a0000000-0000-4000-8000-000000000000"
    lowest_dead = "00000000-0000-4000-8000-000000000000"
    assert admin.leader_of([n(high, True), n(low, True), n(lowest_dead, False)]) == low
    assert admin.leader_of([n(lowest_dead, False)]) is None
    assert admin.leader_of([]) is None


def test_the_cluster_fire_rate_sums_the_live_nodes_own() -> None:
    h = AdminHarness()
    busy, idle, old = (str(uuid.uuid4()) for _ in range(3))
    h.store.heartbeat(busy, fired_per_second=40.0)
    h.store.heartbeat(idle, fired_per_second=2.5)
    h.store.heartbeat(old)  # a node reporting no rate
    status, _, answer = h.call("GET", "/admin/v1/nodes")
    assert status == 200 and answer["fired_per_second"] == 42.5
    assert {n["node_id"]: n["fired_per_second"] for n in answer["nodes"]} == {
        busy: 40.0,
        idle: 2.5,
        old: None,
    }
    validate(answer, "NodeList")
    h.clock.advance(h.settings.liveness_window_ms + 1)  # all dead: nothing fires
    h.store.heartbeat(idle, fired_per_second=1.0)
    assert h.call("GET", "/admin/v1/nodes")[2]["fired_per_second"] == 1.0


# ------------------------------------------------------------------------------ routing


def test_other_paths_are_left_to_the_other_routes() -> None:
    h = AdminHarness()
    for path in ("/health/live", "/metrics", "/administrator", "/"):
        assert h.api.handle("GET", path, "", AUTH) is None


def test_without_a_token_every_admin_path_is_a_404_saying_how_to_enable_it() -> None:
    h = AdminHarness(token="")
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
    h = AdminHarness()
    for path in ("/admin/v1/stats", "/admin/v1/nowhere", "/admin/v1/messages/m1"):
        status, extra, body = h.call("GET", path, headers={})
        assert status == 401 and "WWW-Authenticate" in extra and body["error"]
    result = h.api.handle("GET", "/admin/v1/openapi.json", "", {})
    assert result is not None and result[0] == 200
    assert json.loads(result[2]) == SPEC
    assert h.call("GET", "/admin/v1/nowhere")[0] == 404
    assert h.store.statements == []


def test_methods_not_served_are_a_405_with_allow() -> None:
    h = AdminHarness()
    for method, path, allow in (
        ("POST", "/admin/v1/messages/x", "GET, DELETE"),
        ("PUT", "/admin/v1/stats", "GET"),
        ("DELETE", "/admin/v1/openapi.json", "GET"),
        ("OPTIONS", "/admin/v1/nodes", "GET"),
    ):
        status, extra, _ = h.call(method, path)
        assert (status, extra["Allow"]) == (405, allow)


def test_get_list_cancel_and_stats_on_the_in_memory_store() -> None:
    h = AdminHarness()
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
    assert h.call("DELETE", "/admin/v1/messages/m0")[0] == 202  # may be firing: left to fire
    assert h.call("DELETE", "/admin/v1/messages/m1")[0] == 204
    assert h.call("DELETE", "/admin/v1/messages/m1")[0] == 404
    status, _, stats = h.call("GET", "/admin/v1/stats")
    assert (stats["waiting"], stats["claimed"], stats["parked"]) == (3, 1, 0)
    assert stats["park_attempts"] == 4  # 2 * max_publish_attempts


def test_a_cancel_of_a_claimed_message_is_applied_answered_as_such_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A claimed series cannot be stopped in flight, but the cancel is applied (nothing follows
    the occurrence, a marker is left): the answer says so (202, not an error) and it is logged
    as a cancel, as a waiting message's is."""
    h = AdminHarness()
    every = Rule(every_ms=60_000).encode()
    tick = ScheduledMessage("tick", h.clock.now() + timedelta(seconds=1), b"k", b"v", [])
    h.store.enqueue([dataclasses.replace(tick, recurrence=every)], 0)
    (row,) = h.store.claim(str(uuid.uuid4()), 5_000, 10, 4)
    with caplog.at_level(logging.INFO, logger="chronos.admin"):
        status, _, body = h.call("DELETE", "/admin/v1/messages/tick")
    assert status == 202, body
    validate(body, "CancelClaimed")
    assert (body["id"], body["claimed"]) == ("tick", True)
    assert "not stopped" in body["detail"] and "a series ends with it" in body["detail"]
    (record,) = [r for r in caplog.records if getattr(r, "event", "") == "message_cancelled"]
    assert (record.message_id, record.claimed) == ("tick", True)  # type: ignore[attr-defined]
    assert "tick cancelled" in record.getMessage() and "claimed" in record.getMessage()
    stored = h.store.get_message("tick")
    assert stored is not None and stored.readied_at == row.readied_at  # left to fire
    assert stored.recurrence is None  # nothing follows it
    assert "tick" in h.store.cancel_markers()


def test_a_database_error_is_a_503_not_a_crash() -> None:
    h = AdminHarness()
    h.store.fail_next(1, "backlog")
    status, _, body = h.call("GET", "/admin/v1/stats")
    assert status == 503 and body["error"]


# ------------------------------------------------------------------------------ the spec


def test_the_representations_match_the_spec() -> None:
    h = AdminHarness()
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
    validate(h.call("GET", "/admin/v1/messages/a", "include_value=true")[2], "Message")
    validate(h.call("GET", "/admin/v1/messages")[2], "MessagePage")
    validate(h.call("GET", "/admin/v1/stats")[2], "Stats")
    validate(h.call("GET", "/admin/v1/nodes", "include_dead=true")[2], "NodeList")
    validate(h.call("GET", "/admin/v1/messages", "limit=0")[2], "Error")


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


# ------------------------------------------------------------------------------ requeue


def test_requeue_a_parked_message_and_refuse_the_others() -> None:
    h = AdminHarness()  # park_attempts = 4
    me = str(uuid.uuid4())
    h.seed(2)
    h.clock.advance(301_000)  # m0 and m1 are due
    h.park(me, "m0")
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
    h = AdminHarness()
    status, extra, _ = h.call("GET", "/admin/v1/messages/m0/requeue")
    assert (status, extra["Allow"]) == (405, "POST")
    status, extra, _ = h.call("POST", "/admin/v1/messages/m0/requeue", headers={})
    assert status == 401 and "WWW-Authenticate" in extra
    assert h.call("POST", "/admin/v1/messages/m0/requeue", "x=1")[0] == 400
    assert "/admin/v1/messages/{id}/requeue" in SPEC["paths"]


# ------------------------------------------------------------------------------ reschedule


def test_reschedule_moves_a_waiting_message_and_answers_it_as_get_does() -> None:
    h = AdminHarness()
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
    h = AdminHarness()  # park_attempts = 4
    me = str(uuid.uuid4())
    h.seed(2)
    h.clock.advance(301_000)  # m0 and m1 are due
    h.park(me, "m0")
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
    h = AdminHarness()
    h.seed(1)
    status, _, answer = h.call("POST", "/admin/v1/messages/m0/reschedule", body=body)
    assert status == 400 and answer["error"]
    assert h.call("GET", "/admin/v1/messages/m0")[2]["deadline"] == "2030-01-01T00:05:00Z"


def test_reschedule_takes_post_only_needs_the_token_and_is_in_the_spec() -> None:
    h = AdminHarness()
    h.seed(1)
    status, extra, _ = h.call("GET", "/admin/v1/messages/m0/reschedule")
    assert (status, extra["Allow"]) == (405, "POST")
    when = {"delay_ms": 1}
    status, extra, _ = h.call("POST", "/admin/v1/messages/m0/reschedule", headers={}, body=when)
    assert status == 401 and "WWW-Authenticate" in extra
    assert h.call("POST", "/admin/v1/messages/m0/reschedule", "x=1", body=when)[0] == 400
    operation = SPEC["paths"]["/admin/v1/messages/{id}/reschedule"]["post"]
    assert set(operation["responses"]) == {"200", "400", "401", "403", "404", "409", "503"}
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


# ------------------------------------------------------------------------------ tenants


def test_tenants_endpoint_lists_the_busiest_as_the_spec_says() -> None:
    h = AdminHarness(tenant_metrics_top=2)
    h.seed_tenants()
    status, _, body = h.call("GET", "/admin/v1/tenants")
    assert status == 200
    validate(body, "TenantList")
    assert body["limit"] == 2 and body["tenants_complete"]
    assert [(t["tenant"], t["overdue"], t["waiting"]) for t in body["tenants"]] == [
        ("gflood", 2, 2),
        ("gsmall", 1, 2),
    ]
    assert body["tenants"][0]["oldest_overdue_age_seconds"] == pytest.approx(30)
    status, _, body = h.call("GET", "/admin/v1/tenants", "limit=3")
    assert [t["tenant"] for t in body["tenants"]] == ["gflood", "gsmall", "gquiet"]


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=x", "by=tenant"])
def test_tenants_endpoint_refuses_bad_parameters(query: str) -> None:
    status, _, body = AdminHarness().call("GET", "/admin/v1/tenants", query)
    assert status == 400 and body["error"]


def test_tenants_endpoint_needs_the_token_and_get() -> None:
    h = AdminHarness()
    assert h.call("GET", "/admin/v1/tenants", headers={})[0] == 401
    assert h.call("POST", "/admin/v1/tenants")[0] == 405


def test_a_page_of_big_messages_is_cut_by_bytes_and_the_cursor_goes_on() -> None:
    """1,000 rows of 1 MB headers must not build a gigabyte in the node: a page ends once its
    keys and headers pass the page budget (4 MB), and its cursor leads to the rest."""
    h = AdminHarness()
    base = h.clock.now() + timedelta(hours=1)
    big: list[tuple[str, bytes | None]] = [("h", b"x" * 1_000_000)]
    h.store.enqueue(
        [
            ScheduledMessage(f"b{i:02}", base + timedelta(seconds=i), b"k", b"v", big)
            for i in range(12)
        ],
        0,
    )
    seen: list[str] = []
    cursor = ""
    pages = 0
    while True:
        query = "limit=1000" + (f"&cursor={cursor}" if cursor else "")
        status, _, body = h.call("GET", "/admin/v1/messages", query)
        assert status == 200
        pages += 1
        ids = [m["id"] for m in body["messages"]]
        assert 1 <= len(ids) <= 4, ids  # 4 MB of headers at most (one row whatever its size)
        seen += ids
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert seen == [f"b{i:02}" for i in range(12)] and pages >= 3


def test_every_path_of_the_spec_is_served_with_exactly_its_methods() -> None:
    """The spec's methods per path are what the API allows (its 405's Allow): pauses and
    limits with GET, POST and DELETE like the rest."""
    h = AdminHarness()
    for path, item in SPEC["paths"].items():
        documented = {m.upper() for m in item if m in ("get", "post", "put", "patch", "delete")}
        status, extra, _ = h.call("PATCH", path.replace("{id}", "x"))
        assert status == 405, path
        assert set(extra["Allow"].split(", ")) == documented, path


def test_a_missing_grant_is_a_500_that_says_so_not_a_503() -> None:
    """The role may not read the pauses (SQLSTATE class 42): waiting will not help, so the
    answer is not "unavailable; try again"."""
    h = AdminHarness()
    h.store.fail_next(
        1,
        "list_pauses",
        "list_pauses failed: permission denied for table chronos_pauses",
        refused=True,
    )
    status, _, body = h.call("GET", "/admin/v1/pauses")
    assert status == 500, body
    assert "refused" in body["error"] and "chronos check" in body["error"], body
