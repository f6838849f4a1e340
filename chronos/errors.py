"""One root for every error Chronos raises; driver errors are translated at the adapter boundary."""

from __future__ import annotations


class ChronosError(Exception):
    """Root of all Chronos errors."""


class ConfigError(ChronosError):
    """A setting is missing or invalid; the message names it. Start-up stops."""


class StoreError(ChronosError):
    """The database failed; the operation may be retried after a reconnect."""


class PublishError(ChronosError):
    """The broker refused or timed out a record."""


class TopicMissingError(ChronosError):
    """A configured topic does not exist on the broker."""
