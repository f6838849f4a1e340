"""Chronos: a persistent time-delay scheduler for Kafka, backed by Postgres."""

__version__ = "0.1.0"
