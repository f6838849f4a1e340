"""Embedded services: a real Postgres server and a real Kafka-protocol broker on this machine.

``chronos dev`` and the test suite start their services with these classes, so both share one
tested code path. They are for development and tests; production uses real clusters.
"""

from chronos.embedded.broker import EmbeddedBroker, broker_binary, create_topics
from chronos.embedded.postgres import POSTGRES_SYSTEM_USER, EmbeddedPostgres, postgres_bin_dir
from chronos.embedded.process import free_port

__all__ = [
    "POSTGRES_SYSTEM_USER",
    "EmbeddedBroker",
    "EmbeddedPostgres",
    "broker_binary",
    "create_topics",
    "free_port",
    "postgres_bin_dir",
]
