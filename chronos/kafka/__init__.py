"""Kafka: client configuration (one place), the publisher and consumer, start-up checks,
consumer lag."""

from __future__ import annotations

from chronos.kafka.clients import (
    DeliveryCallback,
    KafkaPublisher,
    Publisher,
    delivery_error,
    is_permanent,
    is_refused_record,
    make_consumer,
    make_publisher,
)
from chronos.kafka.config import (
    admin_config,
    consumer_config,
    failover_config,
    import_producer_config,
    producer_config,
    tail_consumer_config,
)
from chronos.kafka.startup import check_access, check_topics, missing_operation, reach_broker

__all__ = [
    "DeliveryCallback",
    "KafkaPublisher",
    "Publisher",
    "admin_config",
    "check_access",
    "check_topics",
    "consumer_config",
    "delivery_error",
    "failover_config",
    "import_producer_config",
    "is_permanent",
    "is_refused_record",
    "make_consumer",
    "make_publisher",
    "missing_operation",
    "producer_config",
    "reach_broker",
    "tail_consumer_config",
]
