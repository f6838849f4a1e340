"""In-process Chronos nodes and the records they read and write, for the integration tier: what
was sent, the output read back from the beginning, the claims in the table (the ``nodes`` fixture
is in conftest.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import psycopg
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from kafka.partitioner.default import murmur2

from chronos.config.settings import Settings
from chronos.node.supervisor import Node
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
from chronos.store import DEFAULT_CANCEL_TTL_MS, ClaimedRow, Outcome, PostgresStore
from tests.support import Topics, consumer_config, make_settings
from tests.support.polling import eventually

Headers = list[tuple[str, bytes | None]]
TEST_ID = "x-test-id"  # an ordinary header: relayed, identifies each record on the output


def now() -> datetime:
    return datetime.now(UTC)


def ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)


def java_partition(key: bytes, partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a non-null key."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class Sent:
    test_id: str
    key: bytes | None
    value: bytes | None
    headers: Headers  # as sent, Chronos headers included
    deadline: datetime | None

    @property
    def relayed_headers(self) -> Headers:
        return [(n, v) for n, v in self.headers if n not in (MESSAGE_ID_HEADER, DEADLINE_HEADER)]


def chronos_record(
    message_id: str,
    deadline: datetime | str,
    *,
    key: bytes | None = b"key",
    value: bytes | None = b"value",
    before: Headers | None = None,
    after: Headers | None = None,
    test_id: str | None = None,
) -> Sent:
    raw = deadline if isinstance(deadline, str) else format_deadline(deadline)
    tid = test_id or message_id
    headers: Headers = [
        *(before or []),
        (MESSAGE_ID_HEADER, message_id.encode()),
        (TEST_ID, tid.encode()),
        (DEADLINE_HEADER, raw.encode()),
        *(after or []),
    ]
    parsed = deadline if isinstance(deadline, datetime) else None
    return Sent(tid, key, value, headers, parsed)


def produce(bootstrap: str, topic: str, records: Sequence[Sent]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=cast(Any, r.headers))
    assert producer.flush(30) == 0


def read(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    timeout: float = 20.0,
    settle: float = 1.0,
) -> list[Message]:
    """Every record of ``topic`` from the beginning: waits for ``count``, then ``settle`` more
    seconds so that a duplicate would show up."""
    consumer = Consumer({**consumer_config(bootstrap), "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[Message] = []
    try:
        limit = time.monotonic() + timeout
        settled_at: float | None = None
        while time.monotonic() < limit:
            if len(records) >= count:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
            for m in consumer.consume(500, timeout=0.2):
                if m.error() is None:
                    records.append(m)
    finally:
        consumer.close()
    return records


def headers_of(record: Message) -> Headers:
    """A consumed record's headers: a list of (str, bytes | None) pairs."""
    return cast(Headers, record.headers() or [])


def tid_of(record: Message) -> str:
    for name, value in headers_of(record):
        if name == TEST_ID and value is not None:
            return value.decode()
    raise AssertionError(f"record without {TEST_ID}: {record.headers()}")


def fire_ms(record: Message) -> int:
    _kind, stamp = record.timestamp()
    assert stamp > 0, "the output record has no timestamp"
    return int(stamp)


def assert_not_early(records: Sequence[Message], sent: dict[str, Sent], advance_ms: int) -> None:
    for record in records:
        deadline = sent[tid_of(record)].deadline
        assert deadline is not None
        earliest = ms(deadline) - advance_ms
        assert fire_ms(record) >= earliest - 1, (
            f"{tid_of(record)} fired {earliest - fire_ms(record)} ms before deadline - advance"
        )


ALL_ROWS = "SELECT id, readied_by::text, readied_at FROM chronos_messages ORDER BY id"
CLAIMED_ROWS = (
    "SELECT id, readied_by::text, readied_at FROM chronos_messages"
    " WHERE readied_at IS NOT NULL ORDER BY id"
)


def rows(url: str, claimed_only: bool = False) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(CLAIMED_ROWS if claimed_only else ALL_ROWS).fetchall()


class RecordingStore:
    """A PostgresStore that remembers what enqueue decided and what was claimed."""

    def __init__(self, url: str) -> None:
        self._store = PostgresStore(url)
        self.outcomes: dict[str, list[Outcome]] = {}
        self.claimed: list[str] = []
        self._lock = threading.Lock()

    def enqueue(
        self,
        messages: Any,
        advance_ms: int,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        **flow: Any,
    ) -> list[Outcome]:
        result = self._store.enqueue(messages, advance_ms, cancel_ttl_ms, **flow)
        with self._lock:
            for m, outcome in zip(messages, result, strict=True):
                self.outcomes.setdefault(m.id, []).append(outcome)
        return result

    def claim(self, *args: Any, **kwargs: Any) -> list[ClaimedRow]:
        result = self._store.claim(*args, **kwargs)
        with self._lock:
            self.claimed.extend(r.id for r in result)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


ON_TIME_MS = 1000
"""How late a message no fault touched may fire in these tests: the README promises milliseconds
on a quiet node (tests/e2e/test_precision.py holds the machine to itself and checks them); here
the other test worker shares the two cores."""


class Nodes:
    """Starts in-process nodes; stops whatever is still running at the end of the test."""

    def __init__(self, database_url: str, bootstrap: str, topics: Topics) -> None:
        self.database_url = database_url
        self.bootstrap = bootstrap
        self.topics = topics
        self.running: list[Node] = []

    def settings(self, **overrides: Any) -> Settings:
        """The shipped defaults but for what a test overrides (and the test services)."""
        return make_settings(self.database_url, self.bootstrap, self.topics, **overrides)

    def start(self, store: Any = None, *, ready: bool = True, **overrides: Any) -> Node:
        """Start a node; with ``ready``, wait until the running nodes share every input
        partition (the group join takes a few seconds), so deadlines can be set from then."""
        node = Node(self.settings(**overrides), store=store)
        node.start()
        self.running.append(node)
        if ready:
            assert eventually(self._assigned, timeout=30), "the input partitions were not assigned"
        return node

    def _assigned(self) -> bool:
        owned = [node.state.loops["intake"][0].assigned for node in self.running]  # type: ignore[attr-defined]
        every = set().union(*owned)
        return (
            all(owned)
            and len(every) == self.topics.partitions
            and sum(map(len, owned)) == len(every)
        )

    def stop(self, node: Node, timeout: float = 20.0) -> int:
        result: list[int] = []
        node.request_stop()
        waiter = threading.Thread(target=lambda: result.append(node.wait()))
        waiter.start()
        waiter.join(timeout)
        self.running.remove(node)
        assert result, "the node did not stop within the timeout"
        return result[0]

    def stop_all(self) -> None:
        for node in list(self.running):
            self.stop(node)
