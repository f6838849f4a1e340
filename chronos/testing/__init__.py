"""Test doubles for code built on Chronos: an in-memory store with the Postgres store's
behaviour, fake Kafka clients, a manual clock. Production code never imports this package."""

from __future__ import annotations

from chronos.testing.memory.store import (
    FakeConsumer,
    FakePublisher,
    InMemoryStore,
    ManualClock,
    ProducedRecord,
    StoredRow,
    make_record,
    unfenced,
)

__all__ = [
    "FakeConsumer",
    "FakePublisher",
    "InMemoryStore",
    "ManualClock",
    "ProducedRecord",
    "StoredRow",
    "make_record",
    "unfenced",
]
