"""Embedded services: a real Postgres server and a real Apache Kafka on this machine.

``chronos dev`` and the test suite start their services with these classes, so both share one
tested code path. They are for development and tests; production uses real clusters.
"""

from chronos.embedded.kafka.broker import EmbeddedKafka
from chronos.embedded.kafka.cluster import EmbeddedKafkaCluster
from chronos.embedded.postgres import POSTGRES_SYSTEM_USER, EmbeddedPostgres, postgres_bin_dir
from chronos.embedded.process import free_port, free_ports
from chronos.embedded.tansu import TansuBroker
from chronos.embedded.topics import create_topics

__all__ = [
    "POSTGRES_SYSTEM_USER",
    "EmbeddedKafka",
    "EmbeddedKafkaCluster",
    "EmbeddedPostgres",
    "TansuBroker",
    "create_topics",
    "free_port",
    "free_ports",
    "postgres_bin_dir",
]
