"""The store contract of pauses: a paused tenant or target topic is recorded once (when, by
whom) and listed; the claims (plain and fair) skip its rows, except those past their expiry limit,
and take them again once resumed. Part of ``StoreContract``."""

from __future__ import annotations

from datetime import datetime, timedelta

from chronos.protocol import Action, ScheduledMessage
from chronos.store import PauseKind, PauseSet
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
