"""What becomes of a message the broker refuses or that comes too late: one place for the
dead-letter, park and expiry policy.

A publish the broker refuses for good (too large, invalid) counts as an attempt; an outage does
not. After ``dead_letter_after`` refusals a message is sent to the dead-letter topic with the
broker's error (intake: a lapsed message published directly; firing: a claimed row). If the
dead-letter topic refuses it as many times again (``park_after`` attempts in all), the row is
parked: kept in the table, never claimed again until an operator requeues or cancels it through
the admin API. An input record whose dead letter the broker refuses for longer than
``dead_letter_timeout_ms`` is parked in the input topic instead (skipped, logged with its
topic/partition/offset, counted).

A message that would be published later past its deadline than its limit allows (its own
chronosExpires, else ``max_lateness_ms``) has expired: it is never published late but
dead-lettered with reason "expired" or dropped (``expired_action``), by the firing loop and by
intake (a record that arrives already due) alike.
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


def expiry_limit_ms(expires_ms: int | None, settings: Settings) -> int | None:
    """How late past its deadline a message may still be published, in ms: its own chronosExpires
    (``expires_ms``), else ``max_lateness_ms``; None when neither limits it (0: off)."""
    if expires_ms is not None:
        return expires_ms
    return settings.max_lateness_ms or None


def expiry_limit_text(expires_ms: int | None, settings: Settings) -> str:
    """The limit of ``expiry_limit_ms`` in words, for an expired message's reason (built only once
    it has expired)."""
    if expires_ms is None:
        return f"CHRONOS_MAX_LATENESS_MS ({settings.max_lateness_ms} ms)"
    return f"its chronosExpires ({expires_ms} ms)"


def refused_topics(settings: Settings) -> tuple[str, ...]:
    """The topics a message may never be fired to, whatever CHRONOS_ALLOWED_TOPICS says: the input
    topic (it would be consumed again), the dead-letter topic (read as a dead letter) and the
    audit topic (a forged audit event). Refused on arrival (``topic_not_allowed``) and, for a row
    stored before, when it comes due."""
    names = (settings.input_topic, settings.dead_letter_topic, settings.audit_topic)
    return tuple(t for t in names if t and t != settings.output_topic)
