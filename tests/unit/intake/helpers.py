"""The intake loop on the fakes, for the intake's unit tests: a manual clock, the in-memory store,
the fake publisher and the fake consumer, driven batch by batch."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, cast

from confluent_kafka import Consumer

from chronos.intake.loop import IntakeLoop
from chronos.testing import FakeConsumer, FakePublisher, InMemoryStore, ManualClock, make_record
from tests.support.kafka import chronos_headers
from tests.unit.helpers import INPUT, settings


class Intake:
    """An intake loop on the fakes; ``record`` builds input records, ``process`` runs a batch."""

    def __init__(self, *, auto: bool = True, **overrides: Any) -> None:
        self.clock = ManualClock()
        self.store = InMemoryStore(self.clock)
        self.publisher = FakePublisher(auto=auto)
        self.consumer = FakeConsumer()
        self.loop = IntakeLoop(
            settings(**overrides),
            self.store,
            self.publisher,
            lambda **_: cast(Consumer, self.consumer),
            clock=self.clock.now,
        )
        self.offset = 0

    def record(
        self,
        message_id: str | None,
        in_ms: float | None,
        key: bytes | None = b"k",
        value: bytes | None = b"v",
        extra: list[tuple[str, bytes | None]] | None = None,
        partition: int = 0,
    ) -> Any:
        headers: list[tuple[str, bytes | None]] = list(extra or [])
        if message_id is not None and in_ms is not None:
            headers = chronos_headers(message_id, self.clock.now() + timedelta(milliseconds=in_ms))
            headers[1:1] = extra or []
        self.offset += 1
        return make_record(INPUT, partition, self.offset, key, value, headers)

    def process(self, *records: Any) -> bool:
        return self.loop.process_batch(cast(Consumer, self.consumer), list(records))


def wait_for(predicate: Any, seconds: float = 5.0) -> bool:
    """Poll ``predicate`` until it holds or ``seconds`` pass; its last answer."""
    limit = time.monotonic() + seconds
    while not predicate() and time.monotonic() < limit:
        time.sleep(0.005)
    return bool(predicate())
