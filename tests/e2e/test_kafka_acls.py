"""Chronos on Apache Kafka with the standard authorizer on (``secured_kafka``: SCRAM-SHA-512 over
TLS, ACLs per principal), every client a real process.

A node's user that may not write the output topic is named by ``chronos check``; a record routed
(``chronosTopic``) to a topic the node's user may not write reaches the dead-letter topic with
the broker's reason, and the other records fire as if it were not there.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AclOperation

from chronos.client import schedule
from chronos.kafka.clients import DELIVERY_NOT_AUTHORIZED
from chronos.protocol import DEAD_LETTER_REASON_HEADER
from tests.e2e.test_cli_e2e import NodeProcess, chronos
from tests.support import Topics
from tests.support.tls import LIMITED_USER, SecuredBroker

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

LIMITED = f"User:{LIMITED_USER[0]}"
DEAD_LETTERED_WITHIN_S = 60.0
VALID = 5
# The valid records' lateness bound (as scenario 17's): what a fault-free run shows (tens of ms),
# with room for this shared machine; a record held up behind a refused one is seconds late.
MAX_VALID_LATENESS_MS = 1500


def acl_topics(secured_kafka: SecuredBroker) -> Topics:
    """An input, output and dead-letter topic of the test's own, made by the super user."""
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(f"acl-in-{suffix}", f"acl-out-{suffix}", f"acl-dlq-{suffix}")
    secured_kafka.scram().create_topics({topics.input: 2, topics.output: 1, topics.dead_letter: 1})
    return topics


def limited_env(database_url: str, secured_kafka: SecuredBroker, topics: Topics) -> dict[str, str]:
    """A node's settings as the ``limited`` user (SCRAM-SHA-512 over TLS)."""
    return {
        "CHRONOS_DATABASE_URL": database_url,
        **secured_kafka.scram(LIMITED_USER).env(),
        "CHRONOS_INPUT_TOPIC": topics.input,
        "CHRONOS_OUTPUT_TOPIC": topics.output,
        "CHRONOS_DEAD_LETTER_TOPIC": topics.dead_letter,
        "CHRONOS_CONSUMER_GROUP": f"{topics.input}-group",
        "CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        "CHRONOS_HTTP_PORT": "0",
        "CHRONOS_LOG_FORMAT": "json",
        "CHRONOS_POLL_INTERVAL_MS": "50",
        "CHRONOS_SHUTDOWN_TIMEOUT_MS": "8000",
    }


def allow_node(secured_kafka: SecuredBroker, topics: Topics, *, output: bool = True) -> None:
    """What a node's user needs: READ on the input topic and its group, WRITE on the output
    (unless not ``output``: DESCRIBE only) and dead-letter topics."""
    secured_kafka.grant(LIMITED, topics.input, AclOperation.READ)
    secured_kafka.grant_group(LIMITED, f"{topics.input}-group", AclOperation.READ)
    secured_kafka.grant(
        LIMITED, topics.output, AclOperation.WRITE if output else AclOperation.DESCRIBE
    )
    secured_kafka.grant(LIMITED, topics.dead_letter, AclOperation.WRITE)


def test_chronos_check_names_the_output_topic_its_user_may_not_write(
    migrated_database_url: str, secured_kafka: SecuredBroker
) -> None:
    topics = acl_topics(secured_kafka)
    allow_node(secured_kafka, topics, output=False)
    env = limited_env(migrated_database_url, secured_kafka, topics)
    result = chronos("check", "--json", env=env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    lines = {c["name"]: c for c in json.loads(result.stdout)}
    assert lines["kafka"]["status"] == "ok", lines["kafka"]
    assert "SASL_SSL" in lines["kafka"]["detail"], lines["kafka"]
    assert lines["input topic"]["status"] == "ok", lines["input topic"]
    assert lines["dead-letter topic"]["status"] == "ok", lines["dead-letter topic"]
    output = lines["output topic"]
    assert output["status"] == "FAIL", output
    assert topics.output in output["detail"], output
    assert "CHRONOS_OUTPUT_TOPIC" in output["detail"], output
    assert "WRITE" in output["detail"], output


@pytest.mark.parametrize("access", ["no ACL", "DESCRIBE only"])
def test_a_record_routed_to_a_topic_its_user_may_not_write_is_dead_lettered_with_the_reason(
    access: str,
    migrated_database_url: str,
    secured_kafka: SecuredBroker,
    run_node: Callable[..., NodeProcess],
) -> None:
    """Per record: the refused ones reach the dead-letter topic with the broker's reason within
    ``DEAD_LETTERED_WITHIN_S``; the others, due at the same instant, fire on time. The node's
    user may not even see the topic (no ACL: its metadata is refused), or may see but not write
    it (DESCRIBE only: the produce request is refused)."""
    topics = acl_topics(secured_kafka)
    allow_node(secured_kafka, topics)
    forbidden = f"acl-forbidden-{uuid.uuid4().hex[:8]}"
    secured_kafka.scram().create_topics({forbidden: 1})  # it exists; the node may not write it
    if access == "DESCRIBE only":
        secured_kafka.grant(LIMITED, forbidden, AclOperation.DESCRIBE)
    env = {**limited_env(migrated_database_url, secured_kafka, topics)}
    env["CHRONOS_ALLOWED_TOPICS"] = "*"
    node = run_node(env=env)
    assert node.wait_for_event("node_started", 60), node.output()

    # Scheduled by another principal (the node's user may not write its input topic), the
    # refused records among the others, all due at the same instant.
    producer = Producer(secured_kafka.scram().client_settings())
    deadline = datetime.now(UTC) + timedelta(seconds=6)
    for i in range(VALID):
        schedule(producer, value="fine", deadline=deadline, topic=topics.input)
        if i in (1, 3):
            schedule(
                producer, value="refused", deadline=deadline, topic=topics.input,
                target_topic=forbidden,
            )  # fmt: skip
    assert producer.flush(30) == 0

    fired = read_all(secured_kafka, topics.output, VALID, 60)
    assert len(fired) == VALID, (fired, node.output()[-3000:])
    deadline_ms = deadline.timestamp() * 1000
    lateness = [timestamp - deadline_ms for _, _, timestamp in fired]
    assert max(lateness) < MAX_VALID_LATENESS_MS, lateness

    dead = read_all(secured_kafka, topics.dead_letter, 2, DEAD_LETTERED_WITHIN_S)
    assert len(dead) == 2, (dead, node.output()[-3000:])
    for headers, value, timestamp in dead:
        assert timestamp - deadline_ms < DEAD_LETTERED_WITHIN_S * 1000
        assert value == b"refused"
        reason = headers.get(DEAD_LETTER_REASON_HEADER, b"").decode()
        assert DELIVERY_NOT_AUTHORIZED in reason, reason
        assert forbidden in reason, reason
    assert node.proc.poll() is None, node.output()
    assert "Traceback" not in node.output()


def read_all(
    secured_kafka: SecuredBroker, topic: str, count: int, timeout: float
) -> list[tuple[dict[str, bytes], bytes | None, int]]:
    """Up to ``count`` records of ``topic`` (one partition) read as the super user: headers,
    value, timestamp (ms)."""
    settings = dict(secured_kafka.admin_settings())
    consumer = Consumer({**settings, "group.id": f"acl-reader-{uuid.uuid4().hex[:8]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[dict[str, bytes], bytes | None, int]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            headers: dict[str, bytes] = {}
            for header in msg.headers() or []:
                value = header[1]
                headers[str(header[0])] = value if isinstance(value, bytes) else b""
            found.append((headers, msg.value(), msg.timestamp()[1]))
    finally:
        consumer.close()
    return found
