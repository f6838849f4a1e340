"""The audit events and their schema: every builder's event validates against the schema the
repository ships (the reserved ones too), and the schema refuses what breaks it."""

from __future__ import annotations

import jsonschema
import pytest

from chronos.observability import audit
from tests.support.audit import VALIDATOR, valid_events

NODE = "9a4b6f0e-0000-4000-8000-000000000001"
DEADLINE = 1_900_000_000.25


def _every_event() -> list[audit.Event]:
    return [
        audit.fired(NODE, "m1", "", DEADLINE, 0.0123, "out", 3, 41),
        audit.fired(NODE, "m2", "acme", DEADLINE, -0.04, "billing", 0, 0),
        audit.dead_lettered(NODE, "m3", "", DEADLINE, DEADLINE + 90, "expired", "late", None),
        audit.dead_lettered(
            NODE, "m4", "t", DEADLINE, DEADLINE + 1, "publish_failed", "refused", ("dlq", 1, 7)
        ),
        audit.action(audit.CANCELLED, NODE, "m5", DEADLINE, via=audit.VIA_KAFKA, by="in/0/12"),
        audit.action(
            audit.RESCHEDULED,
            NODE,
            "m6",
            DEADLINE,
            via=audit.VIA_ADMIN_API,
            by="ops",
            deadline=DEADLINE + 60,
        ),
        audit.action(audit.REQUEUED, NODE, "m7", DEADLINE, via=audit.VIA_ADMIN_API, by="ops"),
        # reserved: in the schema, not emitted yet
        audit.operator(audit.PAUSED, NODE, DEADLINE, by="ops", target={"tenant": "acme"}),
        audit.operator(audit.RESUMED, NODE, DEADLINE, by="ops", target={"topic": "billing"}),
        audit.operator(
            audit.LIMITED, NODE, DEADLINE, by="ops", target={"topic": "b"}, details={"rate": 5}
        ),
        audit.operator(
            audit.BULK,
            NODE,
            DEADLINE,
            by="ops",
            target={"state": "parked", "tenant": "acme"},
            count=1200,
            details={"action": "cancel"},
        ),
    ]


def test_every_event_type_validates_against_the_schema() -> None:
    events = valid_events(audit.encode(e) for e in _every_event())
    kinds = {e["event"] for e in events}
    assert kinds == set(audit.schema()["properties"]["event"]["enum"])
    assert all(e["version"] == audit.SCHEMA_VERSION for e in events)
    fired = events[0]
    assert fired["output"] == {"topic": "out", "partition": 3, "offset": 41}
    assert (fired["deadline"], fired["fired_at"]) == (
        "2030-03-17T17:46:40.250Z",
        "2030-03-17T17:46:40.262Z",
    )
    assert fired["lateness_ms"] == 12.3
    assert "tenant" not in fired and events[1]["tenant"] == "acme"
    assert events[2]["event"] == "expired" and events[2]["dead_letter"] is None
    assert events[3]["event"] == "dead_lettered" and events[3]["code"] == "publish_failed"


@pytest.mark.parametrize(
    "broken",
    [
        {"version": 2},
        {"event": "exploded"},
        {"at": "yesterday"},
        {"output": {"topic": "out", "partition": 0}},
        {"surprise": True},
    ],
)
def test_the_schema_refuses_what_breaks_it(broken: dict[str, object]) -> None:
    event = audit.fired(NODE, "m1", "", DEADLINE, 0.01, "out", 0, 1)
    event.update(broken)
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(event)


def test_an_event_without_its_fields_is_refused() -> None:
    event = audit.action(audit.CANCELLED, NODE, "m1", DEADLINE, via="kafka", by="in/0/1")
    del event["by"]
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(event)
