"""One root for every error Chronos raises; driver errors are translated at the adapter boundary."""

from __future__ import annotations


class ChronosError(Exception):
    """Root of all Chronos errors."""


class ConfigError(ChronosError):
    """A setting is missing or invalid; the message names it. Start-up stops."""


class StoreError(ChronosError):
    """The database failed.

    ``retryable`` is True for outages (connection lost, server shutting down, serialization
    failures): the same statement will work later. It is False when the database refused the
    data itself: retrying the same batch can never succeed.
    """

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


class TopicMissingError(ChronosError):
    """A configured topic does not exist on the broker."""
