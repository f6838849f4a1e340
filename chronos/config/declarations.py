"""The declarations of every setting of a node: one ``Settings`` field each (its type, default,
help, parser and whether it is secret). ``OPTIONS`` (each setting's CHRONOS_* variable and CLI
flag), the CLI parser, the environment binding and the validation all derive from these fields.
Loading is ``chronos.config.settings``; the checks ``chronos.config.validation``. See
docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chronos.config.values import (
    Duration,
    Option,
    Secret,
    _batch_size,
    _boolean,
    _duration,
    _niceness,
    _non_empty,
    _non_negative_int,
    _optional_topic,
    _port,
    _port_or_shared,
    _positive_int,
    _topic,
    _topic_patterns,
    _uuid_or_random,
)


def setting(
    default: Any,
    help: str,
    parse: Callable[[str], Any] = str,
    *,
    secret: bool = False,
    choices: Sequence[str] | None = None,
    group: str,
    metavar: str | None = None,
) -> Any:
    """Declare one setting: a ``Settings`` field whose metadata makes it an ``Option`` (its
    CHRONOS_* variable and flag, and the ``group`` of settings ``--help`` shows it in). ``default``
    is given as the environment would give it: it goes through ``parse`` like any other value."""
    option = Option("", default, help, parse, secret, choices, group, metavar)
    return field(default=Secret(default) if secret else default, metadata={"option": option})


@dataclass(frozen=True)
class Settings:
    """Every knob of a node; each field is one setting (see ``setting``)."""

    database_url: Secret = setting(  # noqa: RUF009 (setting() returns a dataclasses.Field)
        "",
        "Postgres URL; several, space-separated: one per shard",
        secret=True,
        group="postgres",
    )
    shard_map: str = setting(
        "mod",
        "which shard holds each input partition: mod (partition mod shards), mod:K (mod the "
        "first K: a database added) or ranges 0-5:0,6-11:1",
        group="postgres",
        metavar="MAP",
    )
    kafka_bootstrap_servers: str = setting(
        "localhost:9092",
        "Kafka bootstrap servers (host:port,...)",
        group="kafka",
        metavar="HOST:PORT,...",
    )
    kafka_oauth_provider: str = setting(
        "",
        "OAUTHBEARER tokens for every Kafka client: 'aws-msk-iam' (AWS MSK IAM; pip install "
        "aws-msk-iam-sasl-signer-python; the region from AWS_REGION) or a Python callable "
        "'module:function' taking sasl.oauthbearer.config and returning (token, expiry in epoch "
        "seconds); empty: librdkafka's own (sasl.oauthbearer.method=oidc, or none)",
        group="kafka",
    )
    input_topic: str = setting(
        "chronos-input",
        "topic applications publish delayed messages to",
        _topic,
        group="kafka",
    )
    output_topic: str = setting(
        "chronos-output",
        "topic messages are fired to",
        _topic,
        group="kafka",
    )
    dead_letter_topic: str = setting(
        "chronos-dead-letter",
        "topic for malformed input (empty: log, count and drop)",
        _optional_topic,
        group="kafka",
    )
    consumer_group: str = setting(
        "chronos",
        "consumer group of the input topic",
        _non_empty,
        group="kafka",
    )
    group_instance_id: str = setting(
        "",
        "static consumer-group membership id, stable across restarts of this node (e.g. the "
        "pod name): a restarted node gets its partitions back without a rebalance (empty: "
        "dynamic)",
        group="kafka",
    )
    group_protocol: str = setting(
        "classic",
        "consumer-group protocol: classic (cooperative-sticky assignment, 20 s session "
        "timeout) or consumer (the broker-driven protocol of KIP-848, where the broker "
        "supports it)",
        str.lower,
        choices=(
            "classic",
            "consumer",
        ),
        group="kafka",
    )
    node_id: str = setting(
        "",
        "this node's UUID, in its heartbeat row and its claims",
        _uuid_or_random,
        group="node",
        metavar="UUID",
    )
    timing_advance_ms: int = setting(
        50,
        "fire messages up to this many ms before their deadline",
        _non_negative_int,
        group="timing",
    )
    hold_time_ms: int = setting(
        20000,
        "how long a node may hold a claimed message before peers take it over (a node seen "
        "dead is taken over after the liveness window instead; above lookahead + delivery "
        "timeout + poll interval)",
        _positive_int,
        group="timing",
    )
    poll_interval_ms: int = setting(
        100,
        "how often to poll the database for due messages",
        _positive_int,
        group="timing",
    )
    failure_detection_interval_ms: int = setting(
        500,
        "how often to scan for messages claimed longer than the hold time",
        _positive_int,
        group="timing",
    )
    liveness_window_ms: int = setting(
        5000,
        "a node whose heartbeat (written every second) is older than this on the database "
        "clock is dead: the leader (lowest live node id) takes its claims over at once; a "
        "node that cannot write its heartbeat stops firing a second before (at least 3000)",
        _positive_int,
        group="timing",
    )
    lookahead_ms: int = setting(
        1000,
        "claim messages this far ahead of their deadline and fire them from an in-memory timer",
        _non_negative_int,
        group="timing",
    )
    delivery_timeout_ms: int = setting(
        15000,
        "how long the producer may try to deliver one record: above the write stall of a "
        "broker's death (Kafka fences a dead broker after 9 s by default, more when it was the "
        "controller too), so a record is delivered once when writes flow again instead of "
        "timing out and firing again (must leave room in the hold time)",
        _positive_int,
        group="kafka",
    )
    consume_batch_size: int = setting(
        2000,
        "max records consumed and enqueued per transaction (at most 1,000,000)",
        _batch_size,
        group="kafka",
    )
    claim_batch_size: int = setting(
        2000,
        "max rows claimed per statement",
        _positive_int,
        group="flow",
    )
    max_in_flight: int = setting(
        50_000,
        "max messages a node holds claimed in memory (bounds memory whatever the backlog)",
        _positive_int,
        group="flow",
    )
    max_in_flight_bytes: int = setting(
        64 * 1024 * 1024,
        "max bytes (values, keys, headers) a node holds claimed in memory; each byte is held "
        "once (in Python until it is produced, then in the producer's queue until delivered), "
        "a claim's batch twice while it is read: 64 MiB suits a 512 Mi pod",
        _positive_int,
        group="flow",
    )
    max_delay_ms: int = setting(
        0,
        "reject (dead-letter) messages whose deadline is further ahead than this (0: no limit)",
        _non_negative_int,
        group="flow",
    )
    cancel_ttl_ms: int = setting(
        3_600_000,
        "how long a cancel (chronosAction: cancel) is remembered, so that its schedule or "
        "reschedule arriving later (another partition, a producer retry, a replay) is dropped",
        _positive_int,
        group="flow",
    )
    history_ttl: Duration = setting(  # noqa: RUF009
        Duration(days=7),
        "how long the history keeps each ended message (fired, cancelled, expired, "
        "dead-lettered, replaced: `chronos admin get`, `list --state fired`...), in days' "
        "partitions the leader drops whole once past it (0: no history). A change applies to "
        "the partitions created after it (today's and the next two exist ahead)",
        _duration,
        group="postgres",
        metavar="DURATION",
    )
    history_fired: bool = setting(
        True,
        "record fired messages in the history; false: only the messages that ended otherwise "
        "are kept (cancelled, expired, dead-lettered, replaced), and the history costs nothing "
        "on the firing path (no effect with CHRONOS_HISTORY_TTL=0)",
        _boolean,
        group="postgres",
        metavar="BOOL",
    )
    allowed_topics: str = setting(
        "",
        "comma-separated glob patterns of the topics a message may name in chronosTopic "
        "(empty: only the output topic); others are dead-lettered",
        _topic_patterns,
        group="flow",
        metavar="GLOBS",
    )
    tenant_from_key: str = setting(
        "",
        "separator ending the key prefix that names a message's tenant when it has no "
        "chronosTenant header (e.g. ':'); empty: such messages belong to the default tenant",
        group="flow",
        metavar="SEPARATOR",
    )
    relay_id_header: str = setting(
        "",
        "name of a header added to every fired record with its chronosMessageId, its scheduled "
        "instant beside it, so that a consumer can drop the duplicates at-least-once allows "
        "(e.g. chronosMessageId; a series' occurrences share the id: deduplicate on the pair); "
        "empty: none, the output stays byte-exact",
        group="flow",
    )
    relay_deadline_header: str = setting(
        "",
        "name of a header added to every fired record with the instant it was scheduled for "
        "(ISO-8601 UTC, ms; e.g. firedFor); empty: none, or chronosScheduledFor when the id is "
        "relayed",
        group="flow",
    )
    max_publish_attempts: int = setting(
        5,
        "publish attempts of one message before it is dead-lettered",
        _positive_int,
        group="flow",
    )
    max_lateness_ms: int = setting(
        0,
        "a message that would fire more than this late is never fired stale: it is "
        "dead-lettered with reason 'expired' (or dropped, CHRONOS_EXPIRED_ACTION); 0: off",
        _non_negative_int,
        group="flow",
    )
    catchup_rate: int = setting(
        0,
        "paced catch-up: messages per second, cluster-wide, at which messages overdue by more "
        "than CHRONOS_CATCHUP_AFTER_MS fire (each node takes its share of the live nodes), while "
        "those coming due now fire on time; 0: off (a backlog fires as fast as it can)",
        _non_negative_int,
        group="flow",
    )
    catchup_after_ms: int = setting(
        1_000,
        "how overdue a message must be for CHRONOS_CATCHUP_RATE to pace it",
        _positive_int,
        group="flow",
    )
    expired_action: str = setting(
        "dead-letter",
        "what happens to a message past CHRONOS_MAX_LATENESS_MS: 'dead-letter' (reason "
        "'expired'; dropped when there is no dead-letter topic) or 'drop' (counted and logged)",
        str.lower,
        choices=("dead-letter", "drop"),
        group="flow",
    )
    audit_topic: str = setting(
        "",
        "topic that receives one JSON record per outcome (fired, cancelled, rescheduled, "
        "requeued, expired, dead-lettered; schema chronos/observability/audit.schema.json), "
        "best effort at least once: an audit record that cannot be written is counted and "
        "logged, never a reason to hold back a fired record; empty: off",
        _optional_topic,
        group="observability",
    )
    dead_letter_timeout_ms: int = setting(
        60_000,
        "how long intake retries a dead letter the broker refuses before it parks the input "
        "record (logged with its topic/partition/offset, counted) and moves on",
        _positive_int,
        group="flow",
    )
    shutdown_timeout_ms: int = setting(
        10_000,
        "bound on the graceful drain at SIGTERM",
        _positive_int,
        group="timing",
    )
    statement_timeout_ms: int = setting(
        0,
        "Postgres statement_timeout of the node's sessions (0: four fifths of the hold time)",
        _non_negative_int,
        group="postgres",
    )
    vacuum_interval_ms: int = setting(
        5000,
        "the leader vacuums the messages table this often while it has dead rows (1,000 or "
        "more), so that the claims never walk a minute of them between two of Postgres's "
        "autovacuums; needs the table's owner (0: left to autovacuum)",
        _non_negative_int,
        group="postgres",
    )
    database_tcp_timeout_ms: int = setting(
        10_000,
        "drop a Postgres connection whose peer stops answering for this long (TCP keepalives "
        "and tcp_user_timeout; 0: the operating system's defaults)",
        _non_negative_int,
        group="postgres",
    )
    database_synchronous_commit: str = setting(
        "",
        "synchronous_commit of the node's sessions (empty: the server's setting); with a "
        "synchronous standby, 'on' or 'remote_apply' keeps enqueued messages through a "
        "failover",
        str.lower,
        choices=(
            "",
            "on",
            "remote_apply",
            "remote_write",
            "local",
            "off",
        ),
        group="postgres",
    )
    migration_database_url: Secret = setting(  # noqa: RUF009 (setting() returns a dataclasses.Field)
        "",
        "Postgres URL of `chronos migrate` (a role that owns the schema; empty: "
        "CHRONOS_DATABASE_URL; several: one per shard); nodes need only the grants in "
        "docs/configuration.md",
        secret=True,
        group="postgres",
    )
    liveness_timeout_ms: int = setting(
        30_000,
        "/health/live fails when a loop has made no progress for this long (a stuck "
        "statement, a black-holed connection)",
        _positive_int,
        group="observability",
    )
    intake_process: str = setting(
        "separate",
        "where intake runs: 'separate' (its own OS process, so that consuming never holds the "
        "interpreter lock the firing timers wait for) or 'thread' (a thread of the node process)",
        str.lower,
        choices=(
            "separate",
            "thread",
        ),
        group="node",
    )
    intake_niceness: int = setting(
        10,
        "how much lower the CPU priority of the intake process is than the node's (nice): "
        "when they compete for CPU, the firing timers win over consuming (0: the same); "
        "with CHRONOS_INTAKE_PROCESS=separate",
        _niceness,
        group="node",
    )
    header_probe: str = setting(
        "inline",
        "how intake finds the records whose header names the Kafka client cannot read: "
        "'inline' (read each record's headers once in the intake process, catching the "
        "client's error) or 'process' (read them first in a forked child per consumed batch, "
        "which also survives a crash no one has seen yet, at a fork per batch)",
        str.lower,
        choices=(
            "inline",
            "process",
        ),
        group="node",
    )
    http_host: str = setting(
        "0.0.0.0",
        "address of the HTTP server (metrics, health, admin API)",
        group="admin",
    )
    http_port: int = setting(
        8080,
        "port of the HTTP server (0 disables it)",
        _port,
        group="admin",
    )
    admin_port: int = setting(
        0,
        "port of the admin API and the console, apart from health and metrics, which stay on "
        "the HTTP port (0: served on the HTTP port)",
        _port_or_shared,
        group="admin",
    )
    admin_token: Secret = setting(  # noqa: RUF009 (setting() returns a dataclasses.Field)
        "",
        "bearer token of the admin API (empty: admin API off)",
        secret=True,
        group="admin",
    )
    admin_read_token: Secret = setting(  # noqa: RUF009 (setting() returns a dataclasses.Field)
        "",
        "bearer token of the admin API that can only read (list, get, count, stats): any write "
        "answers 403 (empty: none)",
        secret=True,
        group="admin",
    )
    tenant_metrics_top: int = setting(
        10,
        "tenants with their own label in the per-tenant metrics (the busiest; the others are "
        "counted under _other) and rows of the per-tenant overdue gauges",
        _positive_int,
        group="observability",
    )
    log_level: str = setting(
        "INFO",
        "log level",
        str.upper,
        choices=(
            "DEBUG",
            "INFO",
            "WARNING",
            "ERROR",
        ),
        group="observability",
    )
    log_format: str = setting(
        "text",
        "log format",
        str.lower,
        choices=(
            "text",
            "json",
        ),
        group="observability",
    )

    kafka_properties: Mapping[str, str | Secret] = field(default_factory=dict)
    consumer_properties: Mapping[str, str | Secret] = field(default_factory=dict)
    producer_properties: Mapping[str, str | Secret] = field(default_factory=dict)

    @property
    def effective_statement_timeout_ms(self) -> int:
        return self.statement_timeout_ms or self.hold_time_ms * 4 // 5

    @property
    def effective_migration_database_url(self) -> Secret:
        return self.migration_database_url or self.database_url

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


OPTIONS: tuple[Option, ...] = tuple(
    dataclasses.replace(f.metadata["option"], name=f.name)
    for f in dataclasses.fields(Settings)
    if "option" in f.metadata
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}
