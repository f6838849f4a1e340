"""Prometheus metrics (``chronos_`` prefix, Prometheus naming conventions)."""

from __future__ import annotations

import contextlib
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from chronos.observability.histogram import BatchHistogram


class Labelled(Protocol):
    def remove(self, *labelvalues: str) -> None: ...


def remove_series(family: Labelled, *labels: str) -> None:
    """Drop one labelled series of ``family``; one never created on this node (or already gone)
    is no error. prometheus_client before 0.22 raises KeyError for it (pyproject allows 0.20),
    which would end the loop that clears it: every removal of a labelled series goes here."""
    with contextlib.suppress(KeyError):
        family.remove(*labels)


CONSUMED = Counter("chronos_consumed_messages_total", "Records consumed from the input topic")
ENQUEUED = Counter("chronos_enqueued_messages_total", "Messages inserted into the table")
PUBLISHED_DIRECTLY = Counter(
    "chronos_published_directly_messages_total",
    "Messages whose deadline had lapsed on arrival, published without enqueueing",
)
FIRED = Counter(
    "chronos_fired_messages_total", "Messages fired (delivery confirmed) from the table"
)
OCCURRENCES = Counter(
    "chronos_occurrences_fired_total",
    "Occurrences of recurring messages fired (delivery confirmed; also in "
    "chronos_fired_messages_total)",
)
SKIPPED_OCCURRENCES = Counter(
    "chronos_occurrences_skipped_total",
    "Missed occurrences of recurring messages never fired (chronosMissed: latest fires only the "
    "latest of the occurrences a series missed; a cron series' are counted one by one up to "
    "2,000 a fire, estimated from its period beyond)",
)
DEAD_LETTERED = Counter(
    "chronos_dead_lettered_messages_total", "Records sent to the dead-letter topic", ["reason"]
)
DROPPED = Counter(
    "chronos_dropped_messages_total",
    "Records dropped: malformed ones when the dead-letter topic is disabled, and messages past "
    "CHRONOS_MAX_LATENESS_MS with CHRONOS_EXPIRED_ACTION=drop (reason expired)",
    ["reason"],
)
AUDIT_RECORDS = Counter(
    "chronos_audit_records_total",
    "Audit records written to CHRONOS_AUDIT_TOPIC (delivery confirmed), by event type",
    ["event"],
)
AUDIT_DROPPED = Counter(
    "chronos_audit_dropped_total",
    "Audit records not written (best effort: the outcome itself went ahead): 'refused' (the "
    "broker refused or timed out), 'backlog' (too many audit records awaiting a report)",
    ["reason"],
)
DUPLICATES = Counter(
    "chronos_duplicate_messages_total", "Records ignored because their id was already scheduled"
)
ACTIONS = Counter(
    "chronos_actions_total",
    "Reschedules and cancels (chronosAction), and schedules dropped by a cancel, by outcome",
    ["action", "outcome"],
)
SUSPECTED_FAILURES = Counter(
    "chronos_suspected_failures_total",
    "Claimed messages reset because their node's heartbeat lapsed or their claim outlived the "
    "hold time",
)
PUBLISH_ERRORS = Counter("chronos_publish_errors_total", "Failed delivery reports", ["topic_kind"])
DATABASE_ERRORS = Counter(
    "chronos_database_errors_total", "Failed database statements", ["operation"]
)
QUARANTINED = Counter(
    "chronos_quarantined_records_total",
    "Input records whose headers the Kafka client cannot read (found by the header probe)",
)
HEADER_PROBE_DURATION = Histogram(
    "chronos_header_probe_seconds",
    "Time to find the records of a consumed batch whose headers the Kafka client cannot read "
    "(inline, or in a sacrificial child process: CHRONOS_HEADER_PROBE)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 10),
)
OFFSETS_OUT_OF_RANGE = Counter(
    "chronos_intake_offsets_out_of_range_total",
    "Input partitions whose offset to resume at was gone (retention or DeleteRecords moved the "
    "log start past it, or the topic was deleted and created again): the records in between were "
    "never read; intake resumed at the log start",
)
PARKED_INPUT = Counter(
    "chronos_parked_input_records_total",
    "Input records skipped because the dead-letter topic refused them for longer than "
    "dead_letter_timeout_ms (each is logged with its topic/partition/offset)",
)
FENCED_DELETES = Counter(
    "chronos_fenced_deletes_total",
    "Fired messages whose row was no longer claimed by this node at delete time",
)
HISTORY_UNRECORDED = Counter(
    "chronos_history_unrecorded_total",
    "Ended messages whose history record could not be written (no partition for the day, a "
    "missing grant): they ended all the same, without a record",
)
HISTORY_MAINTENANCE_FAILURES = Counter(
    "chronos_history_maintenance_failures_total",
    "History partitions the leader could not create or drop (tried again at its next round)",
    ["action"],
)
HISTORY_PARTITIONS = Gauge(
    "chronos_history_partitions",
    "Daily partitions of the history, as the leader's last maintenance left them (0 on the "
    "other nodes; aggregate with max())",
)
LATENESS_BUCKETS = (
    -0.1,
    -0.05,
    -0.025,
    -0.01,
    -0.005,
    0,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
# Observed once per batch of delivered messages (chronos.observability.histogram): the same family
# as a prometheus_client Histogram, at a fraction of the cost per message.
LATENESS = BatchHistogram(
    "chronos_fire_lateness_seconds",
    "Fire time minus deadline (negative: fired within the timing advance)",
    buckets=LATENESS_BUCKETS,
)
BATCH_SIZE = Histogram(
    "chronos_batch_size_messages",
    "Messages per batch",
    ["operation"],
    buckets=(1, 5, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000),
)
VACUUM_DURATION = Histogram(
    "chronos_vacuum_duration_seconds",
    "The leader's vacuums of the messages table (chronos.cluster.vacuum), by duration",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
STATEMENT_DURATION = Histogram(
    "chronos_statement_duration_seconds",
    "Latency of database statements",
    ["statement"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
IN_FLIGHT = Gauge(
    "chronos_in_flight_messages", "Messages this node holds claimed, waiting to fire or confirm"
)


# -- backlog and lag gauges (chronos.cluster.monitor, chronos.kafka.consumer_lag) -------------
# Cluster-wide values measured from the shared table: every node reports the same numbers, so
# aggregate them with max(), not sum(). Refreshed every few seconds from indexes and the
# planner's estimate, never by a table scan (see the ``backlog`` query).
PAUSED_SINCE = Gauge(
    "chronos_paused_since_timestamp_seconds",
    "When a paused tenant or target topic was paused (Unix time; one series per pause, removed "
    "on resume): the claims skip its messages",
    ["kind", "name"],
)
RATE_LIMITED = Gauge(
    "chronos_rate_limited_messages",
    "Messages of a rate-limited tenant or target topic this node claimed beyond its share of the "
    "limit and gave back at its latest claim of them (they wait; a lower bound of what waits)",
    ["kind", "name"],
)
WAITING = Gauge(
    "chronos_waiting_messages",
    "Rows waiting to be claimed (exact below 100k rows, above that the planner's estimate)",
)
CLAIMED = Gauge("chronos_claimed_messages", "Rows claimed by some node, waiting to fire or confirm")
PARKED = Gauge(
    "chronos_parked_messages",
    "Rows whose publish failed so often that they are never claimed again (capped at 10000)",
)
OVERDUE = Gauge(
    "chronos_overdue_messages",
    "Waiting rows past their deadline and not yet claimed (capped at 10000)",
)
OLDEST_OVERDUE = Gauge(
    "chronos_oldest_overdue_message_age_seconds",
    "Now minus the deadline of the oldest overdue unclaimed row (0 when none is overdue)",
)
BACKLOG_EXACT = Gauge(
    "chronos_backlog_exact",
    "1 when chronos_waiting_messages is an exact count, 0 when it is an estimate",
)
BACKLOG_UPDATED = Gauge(
    "chronos_backlog_last_success_timestamp_seconds",
    "When the backlog gauges were last refreshed successfully (Unix time)",
)
LEADER = Gauge(
    "chronos_leader",
    "1 on the leader (lowest live node id: it runs the failure detection and the backlog "
    "statistics), 0 elsewhere",
)
DELIVERED_AT = Gauge(
    "chronos_firing_delivered_timestamp_seconds",
    "When this node last had a fired record delivered (Unix time; 0: not yet)",
)
CUT_OFF = Counter(
    "chronos_firing_cut_off_total",
    "Times this node found its writes to Kafka stalled while a peer's were delivered, and gave "
    "its claims back for its peers to fire",
)
HEARTBEAT_UPDATED = Gauge(
    "chronos_heartbeat_last_success_timestamp_seconds",
    "When this node last wrote its heartbeat row successfully (Unix time)",
)
# Per node: the lag of the input-topic partitions assigned to this node (librdkafka statistics);
# sum() over nodes is the consumer group's lag.
CONSUMER_LAG = Gauge(
    "chronos_consumer_lag_messages",
    "Records of the input topic not yet consumed by this node, summed over its partitions",
)
CONSUMER_PARTITION_LAG = Gauge(
    "chronos_consumer_partition_lag_messages",
    "Records of one input-topic partition not yet consumed by this node",
    ["topic", "partition"],
)

ASSIGNED_PARTITIONS = Gauge(
    "chronos_assigned_partitions",
    "Input-topic partitions assigned to this node's consumer (0 until the group join completes)",
)
ASSIGNED_PARTITION = Gauge(
    "chronos_assigned_partition",
    "1 for each input-topic partition assigned to this node's consumer (the series goes away "
    "when the partition is revoked)",
    ["topic", "partition"],
)
SLOW_STATEMENTS = Counter(
    "chronos_slow_statements_total",
    "Database statements that ran longer than the slow-statement threshold (1 s)",
    ["statement"],
)
DEADLOCK_RETRIES = Counter(
    "chronos_deadlock_retries_total",
    "Statements Postgres aborted to break a deadlock, run again",
    ["statement"],
)
RUNNING_STATEMENT_AGE = Gauge(
    "chronos_running_statement_age_seconds",
    "Age of the oldest database statement this node is running now (0: none)",
)

# -- per tenant (chronos.observability.tenants bounds the labels: the busiest, then _other) ---
TENANT_FIRED = Counter(
    "chronos_tenant_fired_messages_total",
    "Messages fired (delivered and deleted) by tenant: the busiest tenants by name, the others "
    "under _other",
    ["tenant"],
)
TENANT_LATENESS = BatchHistogram(
    "chronos_tenant_fire_lateness_seconds",
    "Fire time minus deadline by tenant (the busiest tenants by name, the others under _other)",
    ["tenant"],
    buckets=LATENESS_BUCKETS,
)
TENANT_OVERDUE = Gauge(
    "chronos_tenant_overdue_messages",
    "Waiting rows past their deadline, for the tenants with the most (leader only; capped at "
    "10000 per tenant)",
    ["tenant"],
)
TENANT_BACKLOG_CAPPED = Gauge(
    "chronos_tenant_backlog_capped",
    "1 when more tenants have waiting rows than the leader's per-tenant backlog looks at (the "
    "first 1000 by name): the per-tenant overdue gauges may then miss a busy tenant (leader only)",
)
TENANT_OLDEST_OVERDUE = Gauge(
    "chronos_tenant_oldest_overdue_message_age_seconds",
    "Now minus the deadline of the tenant's oldest overdue unclaimed row, for the tenants with "
    "the most overdue rows (leader only)",
    ["tenant"],
)
