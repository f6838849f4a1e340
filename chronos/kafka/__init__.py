"""Kafka: client configuration and construction, the publisher, consumer lag."""

from __future__ import annotations

from chronos.kafka.clients import (
    DeliveryCallback,
    KafkaPublisher,
    Publisher,
    admin_config,
    check_access,
    check_topics,
    consumer_config,
    failover_config,
    import_producer_config,
    is_permanent,
    make_consumer,
    make_publisher,
    missing_operation,
    producer_config,
    reach_broker,
    tail_consumer_config,
)

__all__ = [
    "DeliveryCallback",
    "KafkaPublisher",
    "Publisher",
    "admin_config",
    "check_access",
    "check_topics",
    "consumer_config",
    "failover_config",
    "import_producer_config",
    "is_permanent",
    "make_consumer",
    "make_publisher",
    "missing_operation",
    "producer_config",
    "reach_broker",
    "tail_consumer_config",
]
