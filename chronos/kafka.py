"""Kafka clients: construction with config passthrough, the Publisher interface, topic checks.

Producers are idempotent with ``acks=all`` and a delivery timeout shorter than the hold time, and
pick partitions like the Java client (murmur2), so same-key records keep their partition affinity.
Consumers store offsets only when told to (``enable.auto.offset.store=false``): offsets move once
a batch is durable, never before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from chronos.backlog import CONSUMER_STATS_INTERVAL_MS, record_consumer_stats
from chronos.errors import TopicMissingError
from chronos.protocol import Headers
from chronos.settings import Settings

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None], None]


class Publisher(Protocol):
    """What the loops need from a producer."""

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_delivery: DeliveryCallback,
    ) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...

    def __len__(self) -> int: ...


def _common(settings: Settings) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap_servers,
        "client.id": f"chronos-{settings.node_id[:8]}",
    }
    conf.update(settings.kafka_properties)
    return conf


def producer_config(settings: Settings, purpose: str) -> dict[str, Any]:
    conf = _common(settings)
    conf.update(
        {
            "client.id": f"chronos-{settings.node_id[:8]}-{purpose}",
            "enable.idempotence": True,
            "acks": "all",
            "delivery.timeout.ms": settings.delivery_timeout_ms,
            "request.timeout.ms": min(30000, settings.delivery_timeout_ms),
            "partitioner": "murmur2_random",
            "linger.ms": 2,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": max(100000, 2 * settings.max_in_flight),
        }
    )
    conf.update(settings.producer_properties)
    return conf


def consumer_config(settings: Settings) -> dict[str, Any]:
    conf = _common(settings)
    conf.update(
        {
            "client.id": f"chronos-{settings.node_id[:8]}-intake",
            "group.id": settings.consumer_group,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 1000,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # Return fetches promptly: short delays and the late fast path depend on it.
            "fetch.wait.max.ms": 100,
        }
    )
    conf.update(settings.consumer_properties)
    # At-least-once depends on these two; a passthrough must not silently break it.
    conf["enable.auto.offset.store"] = False
    return conf


class KafkaPublisher:
    """A confluent-kafka Producer behind the Publisher interface."""

    def __init__(self, config: Mapping[str, Any]):
        self._producer = Producer(dict(config))

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_delivery: DeliveryCallback,
    ) -> None:
        def report(err: KafkaError | None, _msg: Message) -> None:
            on_delivery(err)

        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=cast(list[tuple[str, str | bytes | None]], headers) or None,
                    on_delivery=report,
                )
                return
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                self._producer.poll(0.05)
            except KafkaException as exc:
                on_delivery(exc.args[0] if exc.args else KafkaError(KafkaError._FAIL))
                return

    def poll(self, timeout: float) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        return int(self._producer.flush(timeout))

    def __len__(self) -> int:
        return len(self._producer)


def make_publisher(settings: Settings, purpose: str) -> KafkaPublisher:
    return KafkaPublisher(producer_config(settings, purpose))


def make_consumer(settings: Settings, **callbacks: Any) -> Consumer:
    conf = consumer_config(settings)
    # Consumer lag from librdkafka's statistics (chronos_consumer_lag_messages); a passthrough
    # statistics.interval.ms overrides the interval (0 turns the statistics off).
    conf.setdefault("statistics.interval.ms", CONSUMER_STATS_INTERVAL_MS)
    conf.setdefault("stats_cb", record_consumer_stats)
    conf.update(callbacks)
    return Consumer(conf)


def check_topics(settings: Settings, timeout: float = 15.0) -> None:
    """Fail start-up with a clear message if a configured topic does not exist."""
    admin = AdminClient(_common(settings))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise TopicMissingError(
            f"cannot reach Kafka at {settings.kafka_bootstrap_servers} "
            f"(CHRONOS_KAFKA_BOOTSTRAP_SERVERS): {exc}"
        ) from exc
    wanted = {
        "CHRONOS_INPUT_TOPIC": settings.input_topic,
        "CHRONOS_OUTPUT_TOPIC": settings.output_topic,
    }
    if settings.dead_letter_topic:
        wanted["CHRONOS_DEAD_LETTER_TOPIC"] = settings.dead_letter_topic
    for env, topic in wanted.items():
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise TopicMissingError(f"topic {topic!r} ({env}) does not exist on the broker")


# Broker refusals that retrying the same record cannot fix.
_PERMANENT_CODES = {
    getattr(KafkaError, name)
    for name in (
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "INVALID_RECORD",
        "CORRUPT_MESSAGE",
        "RECORD_LIST_TOO_LARGE",
        "_INVALID_ARG",
    )
    if hasattr(KafkaError, name)
}


def is_permanent(err: KafkaError | None) -> bool:
    return err is not None and err.code() in _PERMANENT_CODES
