"""CHRONOS_AUDIT_TOPIC on a real node, the real Postgres and the real broker: the audit topic
holds one valid event per outcome — fired (at the output record's own partition and offset),
cancelled by a chronosAction record and through the admin API (saying by whom), expired and
dead-lettered (with their codes and where the dead letter went); a record naming the audit
topic never reaches it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from chronos import client
from chronos.admin.api import AdminAPI
from chronos.config.settings import Secret
from chronos.embedded import create_topics
from chronos.protocol import DEAD_LETTER_CODE_HEADER
from tests.integration.nodes import Nodes, headers_of, now, read
from tests.support import Topics
from tests.support.audit import valid_events
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

TOKEN = "audit-token"


@pytest.fixture
def audit_topic(kafka_bootstrap: str, topics: Topics) -> Iterator[str]:
    name = f"{topics.input}-audit"
    create_topics(kafka_bootstrap, {name: 1})
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([name], operation_timeout=5).values():
        with contextlib.suppress(Exception):  # best effort: a leftover topic is harmless
            future.result(timeout=5)


def test_the_audit_topic_holds_one_valid_event_per_outcome(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics, audit_topic: str
) -> None:
    with psycopg.connect(nodes.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_key, message_value, attempts, "
            "last_error) VALUES ('stale', now() - interval '1 hour', 'k', 'v', 0, NULL), "
            "('refused', now() + interval '3 seconds', 'k', 'v', 5, 'MSG_SIZE_TOO_LARGE')"
        )
    node = nodes.start(audit_topic=audit_topic, max_lateness_ms=60_000, admin_token=Secret(TOKEN))
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    later = now() + timedelta(minutes=5)
    for message_id in ("fire-me", "cancel-by-kafka", "cancel-by-api"):
        due = now() + timedelta(seconds=2) if message_id == "fire-me" else later
        client.schedule(p, value=b"v", key=b"k", deadline=due, message_id=message_id,
                        topic=topics.input)  # fmt: skip
    assert p.flush(10) == 0
    assert eventually(lambda: _waiting(nodes.database_url, "cancel-by-api"), timeout=15)
    client.cancel(p, "cancel-by-kafka", key=b"k", topic=topics.input)
    assert p.flush(10) == 0
    api = AdminAPI(node.settings, node.store)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    answer = api.handle("DELETE", "/admin/v1/messages/cancel-by-api", "", auth, client="10.0.0.7")
    assert answer is not None and answer[0] == 204

    records = read(kafka_bootstrap, audit_topic, 1, 5, timeout=30)
    events = {(e["event"], e["id"]): e for e in valid_events(r.value() for r in records)}
    assert sorted(events) == [
        ("cancelled", "cancel-by-api"),
        ("cancelled", "cancel-by-kafka"),
        ("dead_lettered", "refused"),
        ("expired", "stale"),
        ("fired", "fire-me"),
    ]
    assert len(records) == 5  # once each
    by_api, by_kafka = events["cancelled", "cancel-by-api"], events["cancelled", "cancel-by-kafka"]
    assert (by_api["via"], by_api["by"]) == ("admin_api", "the admin token from 10.0.0.7")
    assert by_kafka["via"] == "kafka" and str(by_kafka["by"]).startswith(f"{topics.input}/")
    assert events["dead_lettered", "refused"]["code"] == "publish_failed"
    assert events["expired", "stale"]["code"] == "expired"
    (out,) = read(kafka_bootstrap, topics.output, topics.partitions, 1)
    fired = events["fired", "fire-me"]
    assert fired["output"] == {
        "topic": topics.output,
        "partition": out.partition(),
        "offset": out.offset(),
    }
    assert fired["node"] == node.settings.node_id
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 2)
    positions = {(r.partition(), r.offset()) for r in dead}
    for key in (("dead_lettered", "refused"), ("expired", "stale")):
        where = events[key]["dead_letter"]
        assert where["topic"] == topics.dead_letter
        assert (where["partition"], where["offset"]) in positions


def test_a_record_naming_the_audit_topic_is_dead_lettered_and_never_reaches_it(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics, audit_topic: str
) -> None:
    """CHRONOS_ALLOWED_TOPICS=* allows every topic but the input, dead-letter and audit topics:
    a record forging an audit event is dead-lettered on arrival (topic_not_allowed), a row
    stored before the audit topic was set and naming it is dead-lettered when due, and the audit
    topic holds Chronos's own events only."""
    with psycopg.connect(nodes.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_key, message_value, attempts, "
            "target_topic) VALUES ('stored', now() + interval '2 seconds', 'k', 'v', 0, %s)",
            (audit_topic,),
        )
    nodes.start(audit_topic=audit_topic, allowed_topics="*")
    forged = {"event": "fired", "id": "forged", "node": "nobody", "at": "2030-01-01T00:00:00Z"}
    p = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    soon = now() + timedelta(seconds=1)
    client.schedule(p, value=json.dumps(forged), key=b"k", deadline=soon, message_id="forged",
                    topic=topics.input, target_topic=audit_topic)  # fmt: skip
    client.schedule(p, value=b"v", key=b"k", deadline=soon + timedelta(seconds=2),
                    message_id="fire-me", topic=topics.input)  # fmt: skip
    assert p.flush(10) == 0

    records = read(kafka_bootstrap, audit_topic, 1, 2, timeout=30, settle=2)
    events = {(e["event"], e["id"]): e for e in valid_events(r.value() for r in records)}
    assert sorted(events) == [("dead_lettered", "stored"), ("fired", "fire-me")]
    assert len(records) == 2
    assert events["dead_lettered", "stored"]["code"] == "topic_not_allowed"
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 2)
    codes = [dict(headers_of(r)).get(DEAD_LETTER_CODE_HEADER) for r in dead]
    assert codes == [b"topic_not_allowed", b"topic_not_allowed"]
    assert json.dumps(forged).encode() in {r.value() for r in dead}


def _waiting(url: str, message_id: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT 1 FROM chronos_messages WHERE id = %s", (message_id,))
        return row.fetchone() is not None


def test_pauses_resumes_and_limits_are_audited_with_who_what_and_when(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics, audit_topic: str
) -> None:
    node = nodes.start(audit_topic=audit_topic, admin_token=Secret(TOKEN))
    api = AdminAPI(node.settings, node.store)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    before = now()
    calls = [
        ("DELETE", "/admin/v1/limits", "tenant=nobody"),  # 404: nothing done, nothing audited
        ("GET", "/admin/v1/pauses", ""),  # a read: not audited
        ("POST", "/admin/v1/pauses", "tenant=acme"),
        ("DELETE", "/admin/v1/pauses", "tenant=acme"),
        ("POST", "/admin/v1/pauses", f"topic={topics.output}"),
        ("POST", "/admin/v1/limits", f"topic={topics.output}&per_second=200"),
        ("DELETE", "/admin/v1/limits", f"topic={topics.output}"),
    ]
    statuses = [api.handle(m, p, q, auth, client="10.0.0.8") for m, p, q in calls]
    assert [s[0] for s in statuses if s is not None] == [404, 200, 200, 200, 200, 200, 200]

    records = read(kafka_bootstrap, audit_topic, 1, 5, timeout=30)
    events = valid_events(r.value() for r in records)
    assert [(e["event"], e["target"], e.get("details")) for e in events] == [
        ("paused", {"tenant": "acme"}, None),
        ("resumed", {"tenant": "acme"}, None),
        ("paused", {"topic": topics.output}, None),
        ("limited", {"topic": topics.output}, {"per_second": 200}),
        ("limited", {"topic": topics.output}, {"per_second": None}),
    ]
    for event in events:
        assert event["by"] == "the admin token from 10.0.0.8"
        assert event["node"] == node.settings.node_id
        at = datetime.fromisoformat(event["at"])
        assert before - timedelta(seconds=1) <= at <= now() + timedelta(seconds=1)
    assert all(r.key() is None for r in records)
