"""The names of the Chronos headers, the limits of their values, and the header types."""

from __future__ import annotations

MESSAGE_ID_HEADER = "chronosMessageId"
DEADLINE_HEADER = "chronosDeadline"
ACTION_HEADER = "chronosAction"
TOPIC_HEADER = "chronosTopic"
TENANT_HEADER = "chronosTenant"
EVERY_HEADER = "chronosEvery"
CRON_HEADER = "chronosCron"
TIME_ZONE_HEADER = "chronosTimeZone"
UNTIL_HEADER = "chronosUntil"
MISSED_HEADER = "chronosMissed"
EXPIRES_HEADER = "chronosExpires"
OPTIONAL_HEADERS = (
    ACTION_HEADER,
    TOPIC_HEADER,
    TENANT_HEADER,
    EVERY_HEADER,
    CRON_HEADER,
    TIME_ZONE_HEADER,
    UNTIL_HEADER,
    MISSED_HEADER,
    EXPIRES_HEADER,
)
"""The Chronos headers a record may carry at most once besides the id and the deadline."""
RECURRENCE_HEADERS = (EVERY_HEADER, CRON_HEADER, TIME_ZONE_HEADER, UNTIL_HEADER, MISSED_HEADER)
CHRONOS_HEADERS = frozenset({MESSAGE_ID_HEADER, DEADLINE_HEADER, *OPTIONAL_HEADERS})

# The scheduled instant relayed beside the id when CHRONOS_RELAY_DEADLINE_HEADER names no header:
# every occurrence of a series shares its id, so a fired record is (id, scheduled instant).
RELAYED_INSTANT_HEADER = "chronosScheduledFor"


DEAD_LETTER_REASON_HEADER = "chronosDeadLetterReason"  # the reason, for people
DEAD_LETTER_SOURCE_HEADER = "chronosDeadLetterSource"  # topic/partition/offset or chronos/ID
DEAD_LETTER_CODE_HEADER = "chronosDeadLetterCode"  # the reason's stable code, for filters
DEAD_LETTER_REDUCED_HEADER = "chronosDeadLetterReduced"  # what a reduced dead letter left out
# A scheduled message's dead letter (expired, publish_failed): its own Chronos headers are not
# stored, so these say what a replay needs to schedule it again.
DEAD_LETTER_ID_HEADER = "chronosDeadLetterMessageId"  # the id a replay schedules it under
DEAD_LETTER_DEADLINE_HEADER = "chronosDeadLetterDeadline"  # when it was due (a replay: now)
DEAD_LETTER_TOPIC_HEADER = "chronosDeadLetterTopic"  # its chronosTopic (absent: the output topic)
DEAD_LETTER_TENANT_HEADER = "chronosDeadLetterTenant"  # its tenant (absent: the default one)
SCHEDULED_DEAD_LETTER_HEADERS = (
    DEAD_LETTER_ID_HEADER,
    DEAD_LETTER_DEADLINE_HEADER,
    DEAD_LETTER_TOPIC_HEADER,
    DEAD_LETTER_TENANT_HEADER,
)
DEAD_LETTER_HEADERS = (
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_REDUCED_HEADER,
    *SCHEDULED_DEAD_LETTER_HEADERS,
)
"""The headers Chronos adds to a dead-lettered record (a replay removes them)."""

MAX_ID_LENGTH = 128
MAX_TENANT_LENGTH = 128
DEFAULT_TENANT = ""  # the tenant of a message that names none

Header = tuple[str, bytes | None]
Headers = list[Header]
