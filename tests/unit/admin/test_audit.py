"""CHRONOS_AUDIT_TOPIC on the admin side: each write through the admin API (cancel, reschedule,
requeue) is one valid event saying who did it, a cancel of a claimed message too (marked
claimed); reads and refused writes are not; the bulk and flow-control events go through the same
function."""

from __future__ import annotations

import uuid
from datetime import datetime

from chronos.admin.audit import AdminAudit
from chronos.kafka.audit import AuditTrail
from chronos.observability import audit
from chronos.testing import FakePublisher
from tests.support.audit import valid_events
from tests.unit.admin.helpers import AdminHarness

AUDIT = "audit"


def _harness() -> tuple[AdminHarness, FakePublisher]:
    h = AdminHarness(audit_topic=AUDIT)
    publisher = FakePublisher()
    h.api.audit = AdminAudit(h.settings, AuditTrail(publisher, AUDIT))
    h.api.bulk.audit = h.api.messages.audit = h.api.pauses.audit = h.api.limits.audit = h.api.audit
    return h, publisher


def test_admin_writes_are_audited_with_who_did_them() -> None:
    h, publisher = _harness()
    h.seed(6)
    h.clock.advance(300_500)  # m0 and m1 are due (m1 stays claimed), m2..m5 wait
    h.park(str(uuid.uuid4()), "m0")
    assert h.call("GET", "/admin/v1/messages/m4")[0] == 200
    assert h.call("DELETE", "/admin/v1/messages/m4")[0] == 204
    assert h.call("DELETE", "/admin/v1/messages/m1")[0] == 202  # claimed: applied, audited
    assert h.call("DELETE", "/admin/v1/messages/nope")[0] == 404
    status, _, body = h.call("POST", "/admin/v1/messages/m5/reschedule", body={"delay_ms": 60_000})
    assert status == 200
    assert h.call("POST", "/admin/v1/messages/m0/requeue")[0] == 204
    publisher.poll(0)
    events = valid_events(r.value for r in publisher.delivered(AUDIT))
    assert [(e["event"], e["id"], e["via"], e["by"]) for e in events] == [
        ("cancelled", "m4", "admin_api", "the admin token from -"),
        ("cancelled", "m1", "admin_api", "the admin token from -"),
        ("rescheduled", "m5", "admin_api", "the admin token from -"),
        ("requeued", "m0", "admin_api", "the admin token from -"),
    ]
    assert "claimed" not in events[0] and events[1]["claimed"] is True  # its firing goes on
    assert datetime.fromisoformat(events[2]["deadline"]) == datetime.fromisoformat(body["deadline"])


def test_bulk_actions_use_the_same_function() -> None:
    h, publisher = _harness()
    h.api.audit.operator(
        audit.BULK, "ops", {"state": "parked"}, count=12, details={"action": "cancel"}
    )
    publisher.poll(0)
    (event,) = valid_events(r.value for r in publisher.delivered(AUDIT))
    assert (event["event"], event["by"], event["count"]) == ("bulk", "ops", 12)


def test_a_bulk_action_through_the_api_is_one_audit_record_of_its_filter_and_count() -> None:
    h, publisher = _harness()
    h.seed(6)
    status, _, body = h.call("POST", "/admin/v1/bulk/cancel", "id_prefix=m&dry_run=true")
    assert status == 200 and body["matched"] == 6
    status, _, body = h.call("POST", "/admin/v1/bulk/cancel", "id_prefix=m")
    assert status == 200 and body["cancelled"] == 6
    publisher.poll(0)
    (event,) = valid_events(r.value for r in publisher.delivered(AUDIT))  # the dry run: none
    assert (event["event"], event["target"], event["count"]) == ("bulk", {"id_prefix": "m"}, 6)
    assert event["details"]["action"] == "cancel" and event["details"]["complete"] is True


def test_flow_control_is_audited_and_a_404_is_not() -> None:
    h, publisher = _harness()
    assert h.call("DELETE", "/admin/v1/pauses", "topic=t")[0] == 404
    assert h.call("POST", "/admin/v1/pauses", "topic=t")[0] == 200
    assert h.call("DELETE", "/admin/v1/pauses", "topic=t")[0] == 200
    assert h.call("POST", "/admin/v1/limits", "tenant=&per_second=5")[0] == 200
    assert h.call("DELETE", "/admin/v1/limits", "tenant=")[0] == 200
    publisher.poll(0)
    events = valid_events(r.value for r in publisher.delivered(AUDIT))
    assert [(e["event"], e["target"], e.get("details"), e["by"]) for e in events] == [
        ("paused", {"topic": "t"}, None, "the admin token from -"),
        ("resumed", {"topic": "t"}, None, "the admin token from -"),
        ("limited", {"tenant": ""}, {"per_second": 5}, "the admin token from -"),
        ("limited", {"tenant": ""}, {"per_second": None}, "the admin token from -"),
    ]


def test_off_by_default_the_admin_api_makes_no_producer() -> None:
    h = AdminHarness()
    h.seed(2)
    assert h.call("DELETE", "/admin/v1/messages/m1")[0] == 204
    assert h.api.audit._trail is None
