"""Flow control reaches the records that arrive already due: a paused or rate-limited tenant or
target topic, and the paced catch-up, hold them in the table like any other (the claims pace
them); intake publishes straight away only what nothing holds."""

from __future__ import annotations

from chronos.protocol.names import TENANT_HEADER, TOPIC_HEADER
from chronos.store import PauseKind
from tests.unit.helpers import OUTPUT
from tests.unit.intake.helpers import Intake


def test_a_due_record_of_a_paused_tenant_or_topic_waits_in_the_table() -> None:
    t = Intake(allowed_topics="*")
    t.store.pause(PauseKind.TENANT, "acme", "ops")
    t.store.pause(PauseKind.TOPIC, "billing", "ops")
    assert t.process(
        t.record("tenant", -100, extra=[(TENANT_HEADER, b"acme")]),
        t.record("topic", -100, extra=[(TOPIC_HEADER, b"billing")]),
        t.record("free", -100),
    )
    assert "tenant" in t.store and "topic" in t.store
    assert len(t.publisher.records) == 1
    assert "free" not in t.store  # nothing holds it: published at once


def test_a_paused_output_topic_holds_records_that_name_it_or_none() -> None:
    t = Intake(allowed_topics="*")
    t.store.pause(PauseKind.TOPIC, OUTPUT, "ops")
    assert t.process(
        t.record("unnamed", -100),
        t.record("named", -100, extra=[(TOPIC_HEADER, OUTPUT.encode())]),
    )
    assert "unnamed" in t.store and "named" in t.store
    assert t.publisher.records == []


def test_a_due_record_of_a_limited_tenant_waits_for_its_tokens() -> None:
    t = Intake()
    t.store.set_limit(PauseKind.TENANT, "acme", 1, "ops")
    assert t.process(*(t.record(f"a{i}", -100, extra=[(TENANT_HEADER, b"acme")]) for i in range(5)))
    assert all(f"a{i}" in t.store for i in range(5))
    assert t.publisher.records == []


def test_the_paced_catch_up_holds_what_arrives_overdue_by_more_than_its_threshold() -> None:
    t = Intake(catchup_rate=10, catchup_after_ms=1_000)
    assert t.process(t.record("lagging", -5_000), t.record("now", -100))
    assert "lagging" in t.store  # paced by the claims
    assert "now" not in t.store and len(t.publisher.records) == 1  # on time: at once
