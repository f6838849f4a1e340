"""KafkaPublisher over a stand-in for librdkafka's Producer: every record gets one report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError

from chronos.firing.dispatcher import Dispatcher
from chronos.kafka import KafkaPublisher
from chronos.kafka import clients as kafka
from chronos.testing import unfenced
from tests.unit.helpers import claimed_rows, settings

Report = Callable[[KafkaError | None, Any], None]


class LibProducer:
    """Models what matters of confluent_kafka.Producer: reports are served by poll/flush; a
    non-blocking purge hands in-flight records to the background thread, whose reports only
    reach a *later* poll (librdkafka's RD_KAFKA_PURGE_F_NON_BLOCKING)."""

    made: ClassVar[list[LibProducer]] = []

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.outstanding: list[Report] = []
        self.ready: list[tuple[Report, KafkaError | None]] = []
        self.purged_later: list[tuple[Report, KafkaError | None]] = []
        LibProducer.made.append(self)

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.outstanding.append(kwargs["on_delivery"])

    def _serve(self) -> int:
        ready, self.ready = self.ready, []
        for report, err in ready:
            report(err, None)
        self.ready, self.purged_later = self.purged_later, []
        return len(ready)

    def poll(self, timeout: float) -> int:
        return self._serve()

    def flush(self, timeout: float) -> int:
        self._serve()
        return len(self)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        purged = [(r, KafkaError(KafkaError._PURGE_INFLIGHT)) for r in self.outstanding]
        self.outstanding = []
        if blocking:
            self.ready.extend(purged)
        else:
            self.purged_later.extend(purged)

    def __len__(self) -> int:
        return len(self.outstanding) + len(self.ready) + len(self.purged_later)

    def fail_for_good(self) -> None:
        self.config["error_cb"](KafkaError(KafkaError._FATAL, fatal=True))


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> type[LibProducer]:
    LibProducer.made = []
    monkeypatch.setattr(kafka, "Producer", LibProducer)
    return LibProducer


def test_records_of_a_replaced_producer_each_get_exactly_one_failed_report(
    lib: type[LibProducer],
) -> None:
    publisher = KafkaPublisher({"bootstrap.servers": "x", "delivery.timeout.ms": 3000})
    reports: dict[int, list[KafkaError | None]] = {i: [] for i in range(100)}

    def reporter(i: int) -> Callable[[KafkaError | None], None]:
        return reports[i].append

    for i in range(100):
        publisher.produce("t", None, b"v", [], reporter(i))
    lib.made[0].fail_for_good()
    publisher.poll(0)  # replaces the producer
    assert publisher.replacements == 1
    for _ in range(5):
        publisher.poll(0)
    assert all(len(r) == 1 for r in reports.values()), "every record needs one report"
    assert all(r[0] is not None for r in reports.values())  # failed: the callers retry them
    assert len(publisher) == 0
    lib.made[0].poll(0)  # the abandoned producer serving its reports late changes nothing
    assert all(len(r) == 1 for r in reports.values())


def test_a_dispatcher_holds_nothing_after_a_replacement(lib: type[LibProducer]) -> None:
    publisher = KafkaPublisher({"bootstrap.servers": "x", "delivery.timeout.ms": 3000})
    config = settings()
    dispatcher = Dispatcher(config, publisher, unfenced(config.node_id))
    dispatcher.add(claimed_rows(50, size=10, due_in_ms=-1))
    dispatcher.fire_due()
    assert dispatcher.in_flight == 50
    lib.made[0].fail_for_good()
    for _ in range(5):
        publisher.poll(0)
    assert dispatcher.in_flight == 0  # room comes back: the node claims again
    assert len(dispatcher.take_outcomes()[1]) == 50
