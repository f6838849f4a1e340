"""Dead letters as intake writes them, put on a test's dead-letter topic (partition 0): two
whose topic was not allowed and one without a deadline; for the tests of the dead-letter
commands, the admin API's dead-letter endpoints and the console's panel."""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, dead_letter_headers
from tests.support import Topics


def write_dead_letters(bootstrap: str, topics: Topics) -> list[tuple[bytes, list[Any]]]:
    """What intake writes for two records whose topic was not allowed and one without a
    deadline (the same function writes the headers): (key and value, headers) each."""
    letters = []
    for n in range(2):
        original = [(MESSAGE_ID_HEADER, f"t{n}".encode()), ("x", b"keep"), ("x", b"")]
        original.insert(1, (DEADLINE_HEADER, b"2030-01-01T00:00:00.000Z"))
        letters.append(
            (
                f"t{n}".encode(),
                dead_letter_headers(
                    original,
                    "header chronosTopic 'gone' is not allowed",
                    "in/0/1",
                    "topic_not_allowed",
                ),
            )
        )
    letters.append(
        (
            b"m",
            dead_letter_headers(
                [(MESSAGE_ID_HEADER, b"m")],
                "missing header chronosDeadline",
                "in/0/2",
                "missing_deadline",
            ),
        )
    )
    write(bootstrap, topics.dead_letter, letters)
    return letters


def write(bootstrap: str, topic: str, letters: list[tuple[bytes, list[Any]]]) -> None:
    """(key and value, headers) each to partition 0 of ``topic``, in order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for value, headers in letters:
            producer.send(topic, key=value, value=value, headers=headers, partition=0)
        producer.flush(30)
    finally:
        producer.close()


def read_topic(bootstrap: str, topic: str, partitions: int, settle: float = 1.5) -> list[Any]:
    """Every record of ``topic`` (read until nothing arrives for ``settle`` seconds)."""
    import time

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    records: list[Any] = []
    try:
        quiet_until = time.monotonic() + settle
        while time.monotonic() < quiet_until:
            for batch in consumer.poll(200).values():
                records.extend(batch)
                quiet_until = time.monotonic() + settle
    finally:
        consumer.close()
    return records
