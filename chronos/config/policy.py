"""What becomes of a message the broker refuses: one place for the dead-letter and park policy.

A publish the broker refuses for good (too large, invalid) counts as an attempt; an outage does
not. After ``dead_letter_after`` refusals a message is sent to the dead-letter topic with the
broker's error (intake: a lapsed message published directly; firing: a claimed row). If the
dead-letter topic refuses it as many times again (``park_after`` attempts in all), the row is
parked: kept in the table, never claimed again until an operator requeues or cancels it through
the admin API. An input record whose dead letter the broker refuses for longer than
``dead_letter_timeout_ms`` is parked in the input topic instead (skipped, logged with its
topic/partition/offset, counted).
"""

from __future__ import annotations

from chronos.config.settings import Settings


def dead_letter_after(settings: Settings) -> int:
    """Refused publishes after which a message goes to the dead-letter topic."""
    return settings.max_publish_attempts


def park_after(settings: Settings) -> int:
    """Failed publishes after which a row is parked: never claimed again (see claim_due)."""
    return settings.max_publish_attempts * 2


def should_dead_letter(attempts: int, settings: Settings) -> bool:
    """A row refused this many times goes to the dead-letter topic (if there is one)."""
    return bool(settings.dead_letter_topic) and attempts >= dead_letter_after(settings)
