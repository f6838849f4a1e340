"""KafkaPublisher over a stand-in for librdkafka's Producer: every record gets one report."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError

from chronos.firing.dispatcher import Dispatcher
from chronos.kafka import KafkaPublisher, is_permanent
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


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
    ],
)
def test_a_topic_that_cannot_be_written_is_a_refusal_not_an_outage(code: int) -> None:
    """Counted as a refused attempt (then dead-lettered), never retried for ever."""
    assert is_permanent(KafkaError(code))


def test_an_outage_is_not_a_refusal() -> None:
    assert not is_permanent(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not is_permanent(KafkaError(KafkaError._TRANSPORT))


@pytest.mark.parametrize("broker_away", [False, True])
def test_a_stuck_producer_is_replaced_unless_the_broker_is_away(
    lib: type[LibProducer], monkeypatch: pytest.MonkeyPatch, broker_away: bool
) -> None:
    """Deliveries that time out for longer than twice the delivery timeout mean a stuck
    producer, and it is replaced — but not while the broker is known to be away: that explains
    the timeouts, and a new producer would wait for the broker just the same."""
    from chronos.observability import dependencies

    broker = dependencies.Dependency("Kafka", "test-kafka")
    monkeypatch.setattr(kafka, "KAFKA", broker)
    if broker_away:
        broker.failed("all brokers down")
    publisher = KafkaPublisher({"bootstrap.servers": "x", "delivery.timeout.ms": 1})
    reports: list[KafkaError | None] = []
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT)
    for _ in range(2):  # a failure starts the clock; one past twice the delivery timeout
        publisher.produce("t", None, b"v", [], reports.append)
        lib.made[0].ready = [(r, timed_out) for r in lib.made[0].outstanding]
        lib.made[0].outstanding = []
        time.sleep(0.01)
        publisher.poll(0)
    publisher.produce("t", None, b"v", [], reports.append)  # a replacement happens here
    assert reports == [timed_out, timed_out]
    assert publisher.replacements == (0 if broker_away else 1)


def test_a_refusal_after_an_idle_while_is_not_a_stuck_producer(lib: type[LibProducer]) -> None:
    """The first delivery in a long while is refused (record too large): the broker answered,
    so the producer is kept (replacing it would purge every other record in flight)."""
    publisher = KafkaPublisher({"bootstrap.servers": "x", "delivery.timeout.ms": 1})
    time.sleep(0.01)  # idle for longer than twice the delivery timeout
    reports: list[KafkaError | None] = []
    for code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError._MSG_TIMED_OUT):
        publisher.produce("t", None, b"v", [], reports.append)
        lib.made[0].ready = [(r, KafkaError(code)) for r in lib.made[0].outstanding]
        lib.made[0].outstanding = []
        publisher.poll(0)
    publisher.produce("t", None, b"v", [], reports.append)
    assert len(reports) == 2 and publisher.replacements == 0
