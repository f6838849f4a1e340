"""The Chronos message protocol: header names and parsing an input record.

An input record carries ``chronosMessageId`` (1-128 characters of UTF-8) and ``chronosDeadline``
(ISO-8601 with millisecond precision; no offset means UTC, ``Z`` or ``±hh:mm`` is converted).
``chronosAction`` (absent: ``schedule``) may say ``reschedule`` or ``cancel`` (a cancel needs no
deadline); ``chronosTopic`` names the topic to fire to instead of the output topic (allowed only if
it matches the configured patterns); ``chronosTenant`` (1-128 characters of UTF-8) names the tenant
the message belongs to for fair claiming under overload (absent: a prefix of the key when
``CHRONOS_TENANT_FROM_KEY`` names a separator, else the default tenant ``""``). Chronos headers are
not relayed; every other header is, in
order, repeats included.

``parse_record`` turns a raw record into a ``ScheduledMessage`` or a ``Rejection`` whose reason is a
short, stable, human-readable string (it becomes the dead-letter reason header).
"""

from __future__ import annotations

from chronos.protocol.deadline import DeadlineError, format_deadline, format_epoch, parse_deadline
from chronos.protocol.encoding import (
    b64,
    dead_letter_headers,
    decode_headers,
    encode_headers,
    header_items,
    relay_headers,
    scheduled_headers,
    unb64,
)
from chronos.protocol.fields import MAX_EXPIRES_MS, topic_policy
from chronos.protocol.message import Action, Rejection, ScheduledMessage
from chronos.protocol.names import (
    ACTION_HEADER,
    CHRONOS_HEADERS,
    CRON_HEADER,
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_DEADLINE_HEADER,
    DEAD_LETTER_HEADERS,
    DEAD_LETTER_ID_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_REDUCED_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEAD_LETTER_TENANT_HEADER,
    DEAD_LETTER_TOPIC_HEADER,
    DEADLINE_HEADER,
    DEFAULT_TENANT,
    EVERY_HEADER,
    EXPIRES_HEADER,
    MAX_ID_LENGTH,
    MAX_TENANT_LENGTH,
    MESSAGE_ID_HEADER,
    MISSED_HEADER,
    OPTIONAL_HEADERS,
    RECURRENCE_HEADERS,
    RELAYED_INSTANT_HEADER,
    TENANT_HEADER,
    TIME_ZONE_HEADER,
    TOPIC_HEADER,
    UNTIL_HEADER,
    Header,
    Headers,
)
from chronos.protocol.records import parse_record

__all__ = [
    "ACTION_HEADER",
    "CHRONOS_HEADERS",
    "CRON_HEADER",
    "DEADLINE_HEADER",
    "DEAD_LETTER_CODE_HEADER",
    "DEAD_LETTER_DEADLINE_HEADER",
    "DEAD_LETTER_HEADERS",
    "DEAD_LETTER_ID_HEADER",
    "DEAD_LETTER_REASON_HEADER",
    "DEAD_LETTER_REDUCED_HEADER",
    "DEAD_LETTER_SOURCE_HEADER",
    "DEAD_LETTER_TENANT_HEADER",
    "DEAD_LETTER_TOPIC_HEADER",
    "DEFAULT_TENANT",
    "EVERY_HEADER",
    "EXPIRES_HEADER",
    "MAX_EXPIRES_MS",
    "MAX_ID_LENGTH",
    "MAX_TENANT_LENGTH",
    "MESSAGE_ID_HEADER",
    "MISSED_HEADER",
    "OPTIONAL_HEADERS",
    "RECURRENCE_HEADERS",
    "RELAYED_INSTANT_HEADER",
    "TENANT_HEADER",
    "TIME_ZONE_HEADER",
    "TOPIC_HEADER",
    "UNTIL_HEADER",
    "Action",
    "DeadlineError",
    "Header",
    "Headers",
    "Rejection",
    "ScheduledMessage",
    "b64",
    "dead_letter_headers",
    "decode_headers",
    "encode_headers",
    "format_deadline",
    "format_epoch",
    "header_items",
    "parse_deadline",
    "parse_record",
    "relay_headers",
    "scheduled_headers",
    "topic_policy",
    "unb64",
]
