"""The store contract of pauses: a paused tenant or target topic is recorded once (when, by
whom) and listed; the claims (plain and fair) skip its rows, except those past their expiry limit,
and take them again once resumed. Part of ``StoreContract``."""

from __future__ import annotations

from datetime import datetime, timedelta

from chronos.protocol import Action, ScheduledMessage
from chronos.recurrence import make_rule
from chronos.store import Outcome, PauseKind, PauseSet
from tests.support.store_contract.common import HORIZON, Harness, node


def pmsg(
    message_id: str,
    deadline: datetime,
    tenant: str = "",
    topic: str | None = None,
    expires_ms: int | None = None,
) -> ScheduledMessage:
    return ScheduledMessage(
        message_id, deadline, b"k", b"v", [], Action.SCHEDULE, topic, tenant, None, expires_ms
    )


def mixed(harness: Harness) -> None:
    """Rows of tenants acme and other, to topics t1, t2 and the output topic; all due."""
    soon = harness.now() + timedelta(milliseconds=200)
    harness.store.enqueue(
        [
            pmsg("acme-t1", soon, "acme", "t1"),
            pmsg("acme-out", soon, "acme"),
            pmsg("other-t1", soon, "other", "t1"),
            pmsg("other-t2", soon, "other", "t2"),
            pmsg("default-out", soon),
        ],
        0,
    )
    harness.advance(400)


class PauseContract:
    def test_a_pause_is_kept_once_listed_and_resumed(self, harness: Harness) -> None:
        store = harness.store
        assert store.pauses() == []
        first = store.pause(PauseKind.TENANT, "acme", "ops")
        again = store.pause(PauseKind.TENANT, "acme", "someone-else")
        assert again == first  # the first pause's time and author are kept
        assert first.paused_by == "ops" and first.name == "acme"
        store.pause(PauseKind.TOPIC, "acme", "ops")  # a topic of the same name: another pause
        assert [(p.kind, p.name) for p in store.pauses()] == [
            (PauseKind.TENANT, "acme"),
            (PauseKind.TOPIC, "acme"),
        ]
        assert store.resume(PauseKind.TENANT, "acme") == first
        assert store.resume(PauseKind.TENANT, "acme") is None
        assert [(p.kind, p.name) for p in store.pauses()] == [(PauseKind.TOPIC, "acme")]

    def test_the_claims_skip_a_paused_tenant_and_topic(self, harness: Harness) -> None:
        mixed(harness)
        paused = PauseSet(frozenset({"acme"}), frozenset({"t2"}))
        for fair in (False, True):
            me = node()
            rows = harness.store.claim(me, HORIZON, 100, 5, fair=fair, paused=paused)
            assert {r.id for r in rows} == {"other-t1", "default-out"}
            harness.store.release_node(me)
        rest = harness.store.claim(node(), HORIZON, 100, 5)
        assert {r.id for r in rest} == {
            "acme-t1",
            "acme-out",
            "other-t1",
            "other-t2",
            "default-out",
        }

    def test_the_empty_topic_stands_for_the_rows_that_name_none(self, harness: Harness) -> None:
        mixed(harness)
        paused = PauseSet(frozenset(), frozenset({""}))
        rows = harness.store.claim(node(), HORIZON, 100, 5, paused=paused)
        assert {r.id for r in rows} == {"acme-t1", "other-t1", "other-t2"}

    def test_a_paused_row_past_its_expiry_is_claimed(self, harness: Harness) -> None:
        store, now = harness.store, harness.now()
        soon = now + timedelta(milliseconds=200)
        store.enqueue(
            [
                pmsg("own-limit", soon, "acme", expires_ms=500),
                pmsg("default-limit", soon, "acme"),
                pmsg("long-limit", soon, "acme", expires_ms=60_000),
            ],
            0,
        )
        harness.advance(3_000)  # every row 2.8 s overdue
        paused = PauseSet(frozenset({"acme"}))
        rows = store.claim(node(), HORIZON, 100, 5, paused=paused, max_lateness_ms=2_000)
        assert {r.id for r in rows} == {"own-limit", "default-limit"}
        rows = store.claim(node(), HORIZON, 100, 5, fair=True, paused=paused)
        assert rows == []  # no default limit: default-limit waits too

    def test_a_paused_series_past_its_expiry_waits(self, harness: Harness) -> None:
        """A series' latest missed occurrence is not expired (the dispatcher would fire it, and
        advance the row): a paused series waits whatever its lateness, plain claim or fair."""
        store, now = harness.store, harness.now()
        rule = make_rule("PT1S", None, None, None, "latest")
        assert rule is not None
        store.enqueue(
            [
                ScheduledMessage(
                    "series",
                    now + timedelta(milliseconds=200),
                    b"k",
                    b"v",
                    [],
                    Action.SCHEDULE,
                    None,
                    "acme",
                    rule.encode(),
                    500,
                ),
                pmsg("once", now + timedelta(milliseconds=200), "acme", expires_ms=500),
            ],
            0,
        )
        harness.advance(3_000)  # both 2.8 s overdue, past their 500 ms
        paused = PauseSet(frozenset({"acme"}))
        for fair in (False, True):
            me = node()
            rows = store.claim(me, HORIZON, 100, 5, fair=fair, paused=paused, max_lateness_ms=500)
            assert {r.id for r in rows} == {"once"}, fair
            store.release_node(me)

    def test_a_due_record_that_flow_control_holds_is_stored_not_fired_now(
        self, harness: Harness
    ) -> None:
        """Intake's "fire now" skips the table: a record of a paused or limited tenant or topic
        (the output topic named or not), or one the paced catch-up paces, is stored instead."""
        store, now = harness.store, harness.now()
        store.pause(PauseKind.TENANT, "acme", "ops")
        store.pause(PauseKind.TOPIC, "out", "ops")
        store.set_limit(PauseKind.TOPIC, "slow", 5, "ops")
        due = now - timedelta(milliseconds=100)
        messages = [
            pmsg("paused-tenant", due, "acme"),
            pmsg("paused-output", due),
            pmsg("named-output", due, topic="out"),
            pmsg("limited", due, topic="slow"),
            pmsg("lagging", now - timedelta(seconds=5), topic="free"),
            pmsg("free", due, topic="free"),
        ]
        outcomes = store.enqueue(messages, 0, output_topic="out", catchup_after_ms=1_000)
        assert dict(zip([m.id for m in messages], outcomes, strict=True)) == {
            "paused-tenant": Outcome.INSERTED,
            "paused-output": Outcome.INSERTED,
            "named-output": Outcome.INSERTED,
            "limited": Outcome.INSERTED,
            "lagging": Outcome.INSERTED,
            "free": Outcome.FIRE_NOW,
        }
        store.resume(PauseKind.TENANT, "acme")
        again = [pmsg("acme-2", due, "acme", topic="free")]
        assert store.enqueue(again, 0, output_topic="out") == [Outcome.FIRE_NOW]


class LimitContract:
    def test_a_limit_is_set_replaced_listed_and_cleared(self, harness: Harness) -> None:
        store = harness.store
        assert store.limits() == []
        first = store.set_limit(PauseKind.TOPIC, "billing", 200, "ops")
        assert (first.per_second, first.set_by) == (200, "ops")
        store.set_limit(PauseKind.TENANT, "acme", 50, "ops")
        replaced = store.set_limit(PauseKind.TOPIC, "billing", 100, "someone-else")
        assert (replaced.per_second, replaced.set_by) == (100, "someone-else")
        assert [(x.kind, x.name, x.per_second) for x in store.limits()] == [
            (PauseKind.TENANT, "acme", 50),
            (PauseKind.TOPIC, "billing", 100),
        ]
        assert store.clear_limit(PauseKind.TOPIC, "billing") == replaced
        assert store.clear_limit(PauseKind.TOPIC, "billing") is None
        assert [x.name for x in store.limits()] == ["acme"]
