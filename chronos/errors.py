"""One root for every error Chronos raises; driver errors are translated at the adapter boundary."""

from __future__ import annotations

import logging


class ChronosError(Exception):
    """Root of all Chronos errors."""


class ConfigError(ChronosError):
    """A setting is missing or invalid; the message names it. Start-up stops."""


class PortInUse(ConfigError):
    """An embedded server's port is held by another process; ``port`` says which."""

    def __init__(self, message: str, port: int):
        super().__init__(message)
        self.port = port


class StoreError(ChronosError):
    """The database failed.

    ``retryable`` is True for outages (connection lost, server shutting down, serialization
    failures): the same statement will work later. It is False when the database refused the
    data itself: retrying the same batch can never succeed. ``outage`` is True when the
    database could not be reached at all (connection refused, lost, timed out): the outage is
    logged once where it is seen (``chronos.observability.dependencies``), so the callers that
    retry log such errors at ``log_level`` (DEBUG) rather than once per attempt. ``refused`` is
    True when the role may not do it (a missing grant, a missing table: SQLSTATE class 42): a
    configuration to fix, reported as such, not an outage to wait out silently. ``sqlstate`` is
    the database's error code, when it gave one; ``shard`` the shard whose database it was, in
    an answer over several shards.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        outage: bool = False,
        refused: bool = False,
        sqlstate: str | None = None,
        shard: int | None = None,
    ):
        super().__init__(message)
        self.shard = shard  # the shard whose database failed (several shards; docs/shards.md)
        self.retryable = retryable or outage
        self.outage = outage
        self.refused = refused
        self.sqlstate = sqlstate

    @property
    def log_level(self) -> int:
        """The level a retrying caller logs this error at."""
        return logging.DEBUG if self.outage else logging.WARNING


class TopicMissingError(ChronosError):
    """A configured topic does not exist on the broker."""


class BrokerUnreachableError(ChronosError):
    """The Kafka broker did not answer (start-up waits for it)."""
