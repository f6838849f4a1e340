"""What the migration tests share."""

from __future__ import annotations

# An insert of the release before an upgrade, still running beside the new release during a
# rolling upgrade: its enqueue statement reduced to the columns every release has (no tenant, no
# rule, no expiry of its own).
OLD_INSERT = (
    "INSERT INTO chronos_messages (id, deadline, message_value) "
    "VALUES (%s, now() + interval '200 milliseconds', '\\x00'::bytea)"
)
