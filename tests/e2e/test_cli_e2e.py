"""The real command line in subprocesses, driven and checked by an independent client.

``chronos migrate`` builds the schema, ``python -m chronos run`` runs a node configured through
CHRONOS_* variables and flags, kafka-python produces to the input topic and reads the output and
dead-letter topics; SIGTERM stops the node gracefully; bad settings stop start-up with status 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.partitioner.default import murmur2

from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    format_deadline,
    parse_deadline,
)
from chronos.store import PostgresStore
from tests.support import Topics
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CHRONOS = [sys.executable, "-m", "chronos"]
# The installed console script, next to the interpreter (as ``pip install`` puts it).
CHRONOS_SCRIPT = str(Path(sys.executable).with_name("chronos"))
ADVANCE_MS = 50


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def chronos(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, script: bool = False
) -> Any:
    return subprocess.run(
        [*([CHRONOS_SCRIPT] if script else CHRONOS), *args],
        env={**_base_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def node_env(database_url: str, bootstrap: str, topics: Topics) -> dict[str, str]:
    return {
        "CHRONOS_DATABASE_URL": database_url,
        "CHRONOS_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "CHRONOS_INPUT_TOPIC": topics.input,
        "CHRONOS_OUTPUT_TOPIC": topics.output,
        "CHRONOS_DEAD_LETTER_TOPIC": topics.dead_letter,
        "CHRONOS_CONSUMER_GROUP": f"{topics.input}-e2e",
        "CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        "CHRONOS_HTTP_PORT": "0",
        "CHRONOS_LOG_FORMAT": "json",
        "CHRONOS_POLL_INTERVAL_MS": "50",
        "CHRONOS_LOOKAHEAD_MS": "4000",
        "CHRONOS_HOLD_TIME_MS": "6000",
        "CHRONOS_DELIVERY_TIMEOUT_MS": "1000",
        "CHRONOS_SHUTDOWN_TIMEOUT_MS": "8000",
    }


@dataclass
class NodeProcess:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def wait_for_event(self, name: str, timeout: float) -> bool:
        limit = time.monotonic() + timeout
        while time.monotonic() < limit and self.proc.poll() is None:
            if any(e.get("event") == name for e in self.events):
                return True
            time.sleep(0.05)
        return any(e.get("event") == name for e in self.events)

    def output(self) -> str:
        return "".join(self.lines[-40:])


@pytest.fixture
def run_node() -> Iterator[Any]:
    started: list[NodeProcess] = []

    def start(*flags: str, env: dict[str, str]) -> NodeProcess:
        proc = subprocess.Popen(
            [*CHRONOS, "run", *flags],
            env={**_base_env(), **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        node = NodeProcess(proc)
        threading.Thread(target=node.pump, daemon=True).start()
        started.append(node)
        return node

    yield start
    for node in started:
        if node.proc.poll() is None:
            node.proc.kill()  # only our own child, by its handle
            node.proc.wait(10)


@dataclass
class Message:
    test_id: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    deadline_ms: int | None = None

    @property
    def relayed(self) -> list[tuple[str, bytes]]:
        return [(n, v) for n, v in self.headers if n not in (MESSAGE_ID_HEADER, DEADLINE_HEADER)]


def scheduled(test_id: str, deadline: datetime, key: bytes | None, value: bytes | None) -> Message:
    text = format_deadline(deadline)
    headers = [
        ("x-test-id", test_id.encode()),
        (MESSAGE_ID_HEADER, test_id.encode()),
        ("bin", b"\x00\xff\x80"),
        (DEADLINE_HEADER, text.encode()),
        ("bin", b""),  # repeated name, empty value
    ]
    deadline_ms = round(parse_deadline(text).timestamp() * 1000)  # as sent: whole ms
    return Message(test_id, key, value, headers, deadline_ms)


def send(bootstrap: str, topic: str, messages: Sequence[Message]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for m in messages:
            producer.send(topic, key=m.key, value=m.value, headers=m.headers)
        producer.flush(30)
    finally:
        producer.close()


def read_all(
    bootstrap: str, topic: str, partitions: int, count: int, settle: float = 1.0
) -> list[Any]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    records: list[Any] = []
    try:
        limit = time.monotonic() + 30
        settled_at: float | None = None
        while time.monotonic() < limit:
            if len(records) >= count:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
            for batch in consumer.poll(200).values():
                records.extend(batch)
    finally:
        consumer.close()
    return records


def header(record: Any, name: str) -> bytes | None:
    for n, v in record.headers:
        if n == name:
            return v  # type: ignore[no-any-return]
    return None


def claimed_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM chronos_messages WHERE readied_at IS NOT NULL"
        ).fetchone()
    return int(row[0]) if row else 0


def all_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM chronos_messages").fetchone()
    return int(row[0]) if row else 0


# ------------------------------------------------------------------------------------ tests


def test_migrate_run_round_trip_sigterm_and_downgrade(
    database_url: str, kafka_bootstrap: str, topics: Topics, run_node: Any
) -> None:
    env = node_env(database_url, kafka_bootstrap, topics)

    migrated = chronos("migrate", env={"CHRONOS_DATABASE_URL": database_url}, script=True)
    assert migrated.returncode == 0, migrated.stderr
    assert all_rows(database_url) == 0

    node = run_node("--timing-advance-ms", str(ADVANCE_MS), env=env)  # a flag, the rest env
    assert node.wait_for_event("partitions_assigned", 30), node.output()

    due = datetime.now(UTC) + timedelta(seconds=2)
    every_byte = bytes(range(256))
    delayed = [
        scheduled("binary", due, every_byte, every_byte[::-1]),
        scheduled("null-key", due, None, b"{}"),
        scheduled("tombstone", due, b"t", None),
    ] + [scheduled(f"k{i}", due, f"key-{i % 4}".encode(), b"v") for i in range(8)]
    lapsed = scheduled("lapsed", datetime.now(UTC) - timedelta(minutes=1), b"late", b"late")
    bad = Message("bad", b"bk", b"bv", [("x-test-id", b"bad"), (MESSAGE_ID_HEADER, b"b1")])
    send(kafka_bootstrap, topics.input, [*delayed, lapsed, bad])

    expected = {m.test_id: m for m in [*delayed, lapsed]}
    out = read_all(kafka_bootstrap, topics.output, topics.partitions, len(expected))
    dead = read_all(kafka_bootstrap, topics.dead_letter, topics.partitions, 1, settle=0.2)

    ids = sorted((header(r, "x-test-id") or b"").decode() for r in out)
    assert ids == sorted(expected), "each message exactly once"
    for record in out:
        m = expected[(header(record, "x-test-id") or b"").decode()]
        assert (record.key, record.value) == (m.key, m.value)
        assert list(record.headers) == m.relayed
        if m.key is not None:
            assert record.partition == (murmur2(m.key) & 0x7FFFFFFF) % topics.partitions
        if m.test_id != "lapsed":
            assert m.deadline_ms is not None
            assert record.timestamp >= m.deadline_ms - ADVANCE_MS - 1, m.test_id
    (dead_record,) = dead
    assert (dead_record.key, dead_record.value) == (b"bk", b"bv")
    assert list(dead_record.headers)[:2] == bad.headers
    reason = header(dead_record, DEAD_LETTER_REASON_HEADER)
    assert reason == b"missing header chronosDeadline"
    assert eventually(lambda: all_rows(database_url) == 0)

    # Messages claimed ahead of their deadline (lookahead 4 s) when SIGTERM arrives.
    later = datetime.now(UTC) + timedelta(seconds=3)
    held = [scheduled(f"held{i}", later, f"h{i}".encode(), b"h") for i in range(10)]
    send(kafka_bootstrap, topics.input, held)
    assert eventually(lambda: claimed_rows(database_url) == len(held)), node.output()
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(20) == 0, node.output()
    assert claimed_rows(database_url) == 0, "claimed rows left behind after SIGTERM"
    assert all_rows(database_url) == len(held)
    assert any(e.get("event") == "node_stopped" for e in node.events), node.output()

    downgraded = chronos(
        "migrate", "--downgrade", env={"CHRONOS_DATABASE_URL": database_url}, script=True
    )
    assert downgraded.returncode == 0, downgraded.stderr
    with psycopg.connect(database_url) as conn:
        (table,) = conn.execute("SELECT to_regclass('public.chronos_messages')").fetchone() or (0,)
    assert table is None


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["run", "--hold-time-ms", "abc"], {}, "--hold-time-ms"),
        (["run"], {"CHRONOS_HOLD_TIME_MS": "abc"}, "CHRONOS_HOLD_TIME_MS"),
        (["run", "--poll-interval-ms=0"], {}, "--poll-interval-ms"),
        (["run"], {"CHRONOS_INPUT_TOPIC": "not a topic"}, "CHRONOS_INPUT_TOPIC"),
        (["migrate"], {"CHRONOS_LOG_LEVEL": "chatty"}, "CHRONOS_LOG_LEVEL"),
        (["run"], {"CHRONOS_HOLD_TIME_MS": "1000"}, "CHRONOS_HOLD_TIME_MS"),
    ],
)
def test_a_bad_setting_stops_start_up_with_status_2_naming_it(
    args: list[str], env: dict[str, str], named: str
) -> None:
    result = chronos(*args, env={"CHRONOS_DATABASE_URL": "postgresql://x@127.0.0.1:1/x", **env})
    assert result.returncode == 2, result.stderr
    assert named in result.stderr


def _health(port: int, path: str) -> tuple[int, dict[str, str]]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_run_waits_for_a_missing_topic_and_starts_once_it_exists(
    run_node: Any, migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    """A topic missing at start-up (not created yet, or not readable by this node's ACLs) is a
    dependency not there yet: the node stays alive and unready, saying which topic, logs it once
    (then once a minute), and starts when the topic appears. (Correct on Apache Kafka as on the
    embedded broker: the node's metadata request lists the topics, it creates none.)"""
    from confluent_kafka.admin import AdminClient

    from chronos.embedded import create_topics
    from chronos.embedded.process import free_port

    later = topics.output + "-later"
    port = free_port()
    env = node_env(migrated_database_url, kafka_bootstrap, topics)
    env.update(
        {
            "CHRONOS_OUTPUT_TOPIC": later,
            "CHRONOS_HTTP_HOST": "127.0.0.1",
            "CHRONOS_HTTP_PORT": str(port),
        }
    )
    node = run_node(env=env)
    try:
        assert node.wait_for_event("dependency_down", 60), node.output()
        down = next(e for e in node.events if e.get("event") == "dependency_down")
        assert later in down["message"] and "CHRONOS_OUTPUT_TOPIC" in down["message"], down
        live = _health(port, "/health/live")
        ready = _health(port, "/health/ready")
        assert live[0] == 200, live
        assert ready[0] == 503 and later in ready[1]["node_state"], ready
        time.sleep(3)  # a few attempts more: still waiting, one line said it
        assert node.proc.poll() is None, node.output()
        assert [e.get("event") for e in node.events].count("dependency_down") == 1
        create_topics(kafka_bootstrap, {later: topics.partitions})
        assert node.wait_for_event("node_started", 60), node.output()
        assert eventually(lambda: _health(port, "/health/ready")[0] == 200, timeout=30)
    finally:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.delete_topics([later], operation_timeout=5).values():
            with contextlib.suppress(Exception):  # best effort, as the fixture's
                future.result(timeout=5)


def test_an_empty_consumer_group_is_refused_at_start_up(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    """Start-up must stop with status 2 naming the setting, not let the Kafka client abort."""
    env = node_env(migrated_database_url, kafka_bootstrap, topics)
    env["CHRONOS_CONSUMER_GROUP"] = ""
    result = chronos("run", env=env, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "CONSUMER_GROUP" in result.stderr.upper().replace("-", "_")


def test_a_node_id_held_by_a_live_node_is_refused_at_start_up(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    """Two processes sharing a node id would release each other's claims: the second one
    stops with status 2 naming CHRONOS_NODE_ID, without a traceback."""
    node_id = str(uuid.uuid4())
    store = PostgresStore(migrated_database_url)
    try:
        store.heartbeat(node_id, hostname="elsewhere", version="x")  # a live node holds it
        env = node_env(migrated_database_url, kafka_bootstrap, topics)
        env["CHRONOS_NODE_ID"] = node_id
        result = chronos("run", env=env, timeout=60)
    finally:
        store.close()
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "CHRONOS_NODE_ID" in result.stderr
    assert "Traceback" not in result.stderr
