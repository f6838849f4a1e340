"""A fetch that skips records (the embedded broker does it under concurrent producers, see
docs/reliability.md, "intake loss"): intake reads the partition again from the offset it expected,
so every record reaches the table. The broker and Postgres are real; the skip is simulated by a
consumer that hides some records the first time the broker serves them."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Message, Producer

from chronos.intake.loop import IntakeLoop
from chronos.kafka import consumer_config, make_publisher
from chronos.store import PostgresStore
from tests.support import Topics, make_settings
from tests.support.kafka import chronos_headers
from tests.support.polling import eventually

RECORDS = 12


@pytest.mark.parametrize(
    "hides",
    [
        pytest.param({4: 1, 5: 1, 6: 1}, id="found on the second read"),
        # The second read starts inside the gap (5 and 6 stored meanwhile, 4 not yet).
        pytest.param({4: 2, 5: 1, 6: 1}, id="partly found on the second read"),
        # The second read lands in the same not-yet-stored window.
        pytest.param({4: 2, 5: 2, 6: 2}, id="found once settled"),
    ],
)
def test_records_a_fetch_skipped_are_read_again_and_stored(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics, hides: dict[int, int]
) -> None:
    settings = make_settings(migrated_database_url, kafka_bootstrap, topics)
    store = PostgresStore(migrated_database_url)
    later = store.ping() + timedelta(minutes=10)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(RECORDS):
        headers = cast(Any, chronos_headers(f"gap-{n}", later))
        producer.produce(topics.input, key=b"k", value=b"v", headers=headers, partition=0)
    assert producer.flush(10) == 0
    hidden = {(0, offset): times for offset, times in hides.items()}

    class SkippingConsumer(Consumer):
        """Drops each of ``hidden`` the first times it is handed over: fetches that skipped it."""

        def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
            batch = super().consume(num_messages, timeout)
            kept = []
            for record in batch:
                place = (int(record.partition() or 0), int(record.offset() or 0))
                if hidden.get(place):
                    hidden[place] -= 1
                else:
                    kept.append(record)
            return kept

    def consumer_factory(**callbacks: Any) -> Consumer:
        return SkippingConsumer({**consumer_config(settings), **callbacks})  # a node's settings

    loop = IntakeLoop(settings, store, make_publisher(settings, "intake"), consumer_factory)
    worker = threading.Thread(target=loop.run, name="intake")
    worker.start()
    try:

        def missing() -> list[int]:
            return [n for n in range(RECORDS) if store.get_message(f"gap-{n}") is None]

        assert eventually(lambda: not missing(), timeout=30), missing()
        assert not any(hidden.values())  # every skipped record was hidden as often as asked
    finally:
        loop.stop()
        worker.join(30)
        store.close()
