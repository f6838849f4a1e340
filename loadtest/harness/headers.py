"""Header names the harness puts on (and reads back from) every record."""

from __future__ import annotations

# Chronos's own headers: consumed by Chronos, never relayed to the output topic.
CHRONOS_MESSAGE_ID = "chronosMessageId"
CHRONOS_DEADLINE = "chronosDeadline"
# Chronos adds this to records it sends to the dead-letter topic (original headers are kept).
DEAD_LETTER_REASON = "chronosDeadLetterReason"

# The tenant of a message: consumed by Chronos.
CHRONOS_TENANT = "chronosTenant"

# Tracking headers: ordinary headers, so Chronos relays them to the output topic.
RUN = "loadtestRun"
ID = "loadtestId"
DEADLINE_MS = "loadtestDeadlineMs"
SENT_MS = "loadtestSentMs"
TENANT = "loadtestTenant"  # the tenant of a multi-tenant load (also sent without chronosTenant)

# The soak's mix (loadtest.harness.mix): actions and series, consumed by Chronos.
CHRONOS_ACTION = "chronosAction"
CHRONOS_EVERY = "chronosEvery"
CHRONOS_UNTIL = "chronosUntil"
CHRONOS_MISSED = "chronosMissed"
# What a node relays beside each fired record: the instant it was scheduled for (the benchmark's
# nodes relay it, as `chronos dev`'s do), which tells the occurrences of a series apart.
SCHEDULED_FOR = "chronosScheduledFor"
# Tracking header of a series: its period, so the recorder numbers each occurrence.
EVERY_MS = "loadtestEveryMs"
