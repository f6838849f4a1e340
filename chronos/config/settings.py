"""One frozen settings model: every knob, its default, its CHRONOS_* env var and its CLI flag.

Each setting is declared exactly once, as a field of ``Settings`` (its type, default, help,
parser and whether it is secret); ``OPTIONS``, the CLI parser, the environment binding and the
validation all derive from those fields.

Precedence: CLI flag > environment variable > default.

Arbitrary librdkafka properties pass through to the Kafka clients:

* ``CHRONOS_KAFKA__<NAME>`` (all clients), ``CHRONOS_CONSUMER__<NAME>``,
  ``CHRONOS_PRODUCER__<NAME>``:
  ``<NAME>`` is the property with dots written as single underscores, e.g.
  ``CHRONOS_KAFKA__SECURITY_PROTOCOL=SASL_SSL`` sets ``security.protocol``.
* ``--kafka-property NAME=VALUE`` (repeatable), ``--consumer-property``, ``--producer-property``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chronos.config.values import (
    ENV_PREFIX,
    POSTGRES_URL_PREFIXES,
    SECRET_PROPERTY_WORDS,
    Option,
    Secret,
    _batch_size,
    _non_empty,
    _non_negative_int,
    _optional_topic,
    _port,
    _positive_int,
    _postgres_url_or_empty,
    _topic,
    _topic_patterns,
    _uuid_or_random,
    is_secret_property,
    reveal_properties,
)
from chronos.errors import ConfigError

# Re-exported: the value types are part of this module's interface.
__all__ = [
    "AT_LEAST_ONCE_PRODUCER",
    "ENV_PREFIX",
    "KAFKA_PASSTHROUGH_PREFIXES",
    "MIN_LIVENESS_WINDOW_MS",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "Option",
    "POSTGRES_URL_PREFIXES",
    "SECRET_PROPERTY_WORDS",
    "Secret",
    "Settings",
    "add_arguments",
    "as_environment",
    "is_secret_property",
    "load",
    "reveal_properties",
    "setting",
]

KAFKA_PASSTHROUGH_PREFIXES = {
    "kafka": "CHRONOS_KAFKA__",
    "consumer": "CHRONOS_CONSUMER__",
    "producer": "CHRONOS_PRODUCER__",
}


def setting(
    default: Any,
    help: str,
    parse: Callable[[str], Any] = str,
    *,
    secret: bool = False,
    choices: Sequence[str] | None = None,
) -> Any:
    """Declare one setting: a ``Settings`` field whose metadata makes it an ``Option`` (its
    CHRONOS_* variable and flag). ``default`` is given as the environment would give it: it goes
    through ``parse`` like any other value."""
    option = Option("", default, help, parse, secret, choices)
    return field(default=Secret(default) if secret else default, metadata={"option": option})


# Three heartbeat intervals (1 s each): see chronos.cluster.leadership.
MIN_LIVENESS_WINDOW_MS = 3000


@dataclass(frozen=True)
class Settings:
    """Every knob of a node; each field is one setting (see ``setting``)."""

    database_url: Secret = setting(
        "",
        "Postgres URL, e.g. postgresql://user:pass@host:5432/db",
        secret=True,
    )
    kafka_bootstrap_servers: str = setting(
        "localhost:9092",
        "Kafka bootstrap servers (host:port,...)",
    )
    input_topic: str = setting(
        "chronos-input",
        "topic applications publish delayed messages to",
        _topic,
    )
    output_topic: str = setting(
        "chronos-output",
        "topic messages are fired to",
        _topic,
    )
    dead_letter_topic: str = setting(
        "chronos-dead-letter",
        "topic for malformed input (empty: log, count and drop)",
        _optional_topic,
    )
    consumer_group: str = setting(
        "chronos",
        "consumer group of the input topic",
        _non_empty,
    )
    group_instance_id: str = setting(
        "",
        "static consumer-group membership id, stable across restarts of this node (e.g. the "
        "pod name): a restarted node gets its partitions back without a rebalance (empty: "
        "dynamic)",
    )
    group_protocol: str = setting(
        "classic",
        "consumer-group protocol: classic (cooperative-sticky assignment, 6 s session "
        "timeout) or consumer (the broker-driven protocol of KIP-848, where the broker "
        "supports it)",
        str.lower,
        choices=(
            "classic",
            "consumer",
        ),
    )
    node_id: str = setting(
        "",
        "node UUID (default: a new random UUID per process)",
        _uuid_or_random,
    )
    timing_advance_ms: int = setting(
        50,
        "fire messages up to this many ms before their deadline",
        _non_negative_int,
    )
    hold_time_ms: int = setting(
        5000,
        "how long a node may hold a claimed message before peers take it over",
        _positive_int,
    )
    poll_interval_ms: int = setting(
        100,
        "how often to poll the database for due messages",
        _positive_int,
    )
    failure_detection_interval_ms: int = setting(
        500,
        "how often to scan for messages claimed longer than the hold time",
        _positive_int,
    )
    liveness_window_ms: int = setting(
        5000,
        "a node whose heartbeat (written every second) is older than this on the database "
        "clock is dead: the leader (lowest live node id) takes its claims over at once; a "
        "node that cannot write its heartbeat stops firing a second before (at least 3000)",
        _positive_int,
    )
    lookahead_ms: int = setting(
        1000,
        "claim messages this far ahead of their deadline and fire them from an in-memory timer",
        _non_negative_int,
    )
    delivery_timeout_ms: int = setting(
        3000,
        "how long the producer may try to deliver one record (must leave room in the hold time)",
        _positive_int,
    )
    consume_batch_size: int = setting(
        2000,
        "max records consumed and enqueued per transaction (at most 1,000,000)",
        _batch_size,
    )
    claim_batch_size: int = setting(
        2000,
        "max rows claimed per statement",
        _positive_int,
    )
    max_in_flight: int = setting(
        50_000,
        "max messages a node holds claimed in memory (bounds memory whatever the backlog)",
        _positive_int,
    )
    max_in_flight_bytes: int = setting(
        64 * 1024 * 1024,
        "max bytes (values, keys, headers) a node holds claimed in memory; each byte is held "
        "about three times at worst (claim result, Python, producer queue): 64 MiB suits a "
        "512 Mi pod",
        _positive_int,
    )
    max_delay_ms: int = setting(
        0,
        "reject (dead-letter) messages whose deadline is further ahead than this (0: no limit)",
        _non_negative_int,
    )
    cancel_ttl_ms: int = setting(
        3_600_000,
        "how long a cancel (chronosAction: cancel) is remembered, so that its schedule or "
        "reschedule arriving later (another partition, a producer retry, a replay) is dropped",
        _positive_int,
    )
    allowed_topics: str = setting(
        "",
        "comma-separated glob patterns of the topics a message may name in chronosTopic "
        "(empty: only the output topic); others are dead-lettered",
        _topic_patterns,
    )
    tenant_from_key: str = setting(
        "",
        "separator ending the key prefix that names a message's tenant when it has no "
        "chronosTenant header (e.g. ':'); empty: such messages belong to the default tenant",
    )
    max_publish_attempts: int = setting(
        5,
        "publish attempts of one message before it is dead-lettered",
        _positive_int,
    )
    dead_letter_timeout_ms: int = setting(
        60_000,
        "how long intake retries a dead letter the broker refuses before it parks the input "
        "record (logged with its topic/partition/offset, counted) and moves on",
        _positive_int,
    )
    shutdown_timeout_ms: int = setting(
        10_000,
        "bound on the graceful drain at SIGTERM",
        _positive_int,
    )
    statement_timeout_ms: int = setting(
        0,
        "Postgres statement_timeout of the node's sessions (0: four fifths of the hold time)",
        _non_negative_int,
    )
    database_tcp_timeout_ms: int = setting(
        10_000,
        "drop a Postgres connection whose peer stops answering for this long (TCP keepalives "
        "and tcp_user_timeout; 0: the operating system's defaults)",
        _non_negative_int,
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
    )
    migration_database_url: Secret = setting(
        "",
        "Postgres URL of `chronos migrate` (a role that owns the schema; empty: "
        "CHRONOS_DATABASE_URL); nodes then need only the grants in the README",
        _postgres_url_or_empty,
        secret=True,
    )
    liveness_timeout_ms: int = setting(
        30_000,
        "/health/live fails when a loop has made no progress for this long (a stuck "
        "statement, a black-holed connection)",
        _positive_int,
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
    )
    http_host: str = setting(
        "0.0.0.0",
        "address of the HTTP server (metrics, health, admin API)",
    )
    http_port: int = setting(
        8080,
        "port of the HTTP server (0 disables it)",
        _port,
    )
    admin_token: Secret = setting(
        "",
        "bearer token of the admin API (empty: admin API off)",
        secret=True,
    )
    tenant_metrics_top: int = setting(
        10,
        "tenants with their own label in the per-tenant metrics (the busiest; the others are "
        "counted under _other) and rows of the per-tenant overdue gauges",
        _positive_int,
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
    )
    log_format: str = setting(
        "text",
        "log format",
        str.lower,
        choices=(
            "text",
            "json",
        ),
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

    def validate(self, *, require_database: bool = True) -> Settings:
        if require_database and not self.database_url:
            raise ConfigError(
                "database_url is required: set CHRONOS_DATABASE_URL or --database-url"
            )
        if self.database_url and not self.database_url.reveal().startswith(POSTGRES_URL_PREFIXES):
            raise ConfigError("CHRONOS_DATABASE_URL / --database-url must be a postgresql:// URL")
        budget = self.lookahead_ms + self.delivery_timeout_ms + self.poll_interval_ms
        if budget >= self.hold_time_ms:
            raise ConfigError(
                "CHRONOS_HOLD_TIME_MS / --hold-time-ms "
                f"({self.hold_time_ms}) must exceed lookahead_ms + delivery_timeout_ms + "
                f"poll_interval_ms ({budget}); otherwise peers would take over messages "
                "a healthy node is still firing"
            )
        if self.liveness_window_ms < MIN_LIVENESS_WINDOW_MS:
            raise ConfigError(
                "CHRONOS_LIVENESS_WINDOW_MS / --liveness-window-ms "
                f"({self.liveness_window_ms}) must be at least {MIN_LIVENESS_WINDOW_MS}: a node "
                "writes its heartbeat every second and stops firing a second before the window "
                "ends, so a shorter window would take healthy nodes for dead"
            )
        if self.statement_timeout_ms >= self.hold_time_ms:
            raise ConfigError(
                "CHRONOS_STATEMENT_TIMEOUT_MS / --statement-timeout-ms "
                f"({self.statement_timeout_ms}) must be below the hold time "
                f"({self.hold_time_ms}): a longer claim statement would return rows "
                "that peers already took over"
            )
        if self.liveness_timeout_ms <= self.effective_statement_timeout_ms + 5000:
            raise ConfigError(
                f"CHRONOS_LIVENESS_TIMEOUT_MS / --liveness-timeout-ms ({self.liveness_timeout_ms})"
                " must exceed the statement timeout "
                f"({self.effective_statement_timeout_ms} ms) by more than the 5 s retry backoff"
            )
        for source, props in (
            ("CHRONOS_PRODUCER__ / --producer-property", self.producer_properties),
            ("CHRONOS_KAFKA__ / --kafka-property", self.kafka_properties),
        ):
            for name, allowed in AT_LEAST_ONCE_PRODUCER.items():
                if name in props and str(props[name]).strip().lower() not in allowed:
                    env = source.split(" ")[0] + name.upper().replace(".", "_")
                    raise ConfigError(
                        f"{env} / {source.split(' / ')[1]} {name}={props[name]!r} is refused: "
                        f"Chronos needs {name}={sorted(allowed)[0]} for at-least-once delivery"
                    )
        topics = {self.input_topic, self.output_topic}
        if len(topics) != 2:
            raise ConfigError("CHRONOS_INPUT_TOPIC and CHRONOS_OUTPUT_TOPIC must differ")
        if self.dead_letter_topic in topics:
            raise ConfigError(
                "CHRONOS_DEAD_LETTER_TOPIC must differ from the input and output topics"
            )
        if not self.kafka_bootstrap_servers:
            raise ConfigError("CHRONOS_KAFKA_BOOTSTRAP_SERVERS must not be empty")
        return self


OPTIONS: tuple[Option, ...] = tuple(
    dataclasses.replace(f.metadata["option"], name=f.name)
    for f in dataclasses.fields(Settings)
    if "option" in f.metadata
)
OPTIONS_BY_NAME = {o.name: o for o in OPTIONS}


# Producer properties at-least-once depends on, and the values a passthrough may give them.
AT_LEAST_ONCE_PRODUCER = {
    "enable.idempotence": {"true"},
    "acks": {"all", "-1"},
}


def _parse_option(option: Option, raw: str, source: str) -> Any:
    if option.choices is not None:
        normalised = option.parse(raw)
        if normalised not in option.choices:
            raise ConfigError(
                f"{source}={raw!r} is invalid: expected one of {', '.join(option.choices)}"
            )
        return normalised
    try:
        value = option.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}={raw!r} is invalid: {exc}") from None
    return Secret(value) if option.secret else value


def _passthrough_from_env(environ: Mapping[str, str], prefix: str) -> dict[str, str | Secret]:
    props: dict[str, str | Secret] = {}
    for key, value in environ.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            name = key[len(prefix) :].lower().replace("_", ".")
            props[name] = Secret(value) if is_secret_property(name) else value
    return props


def _passthrough_from_flags(items: Sequence[str] | None, flag: str) -> dict[str, str | Secret]:
    props: dict[str, str | Secret] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                f"{flag} {item.partition('=')[0]!r}=... is invalid: expected NAME=VALUE"
            )
        props[name.strip()] = Secret(value) if is_secret_property(name) else value
    return props


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per option; the help shows its env var and default."""
    group = parser.add_argument_group("settings (flag > environment > default)")
    for option in OPTIONS:
        default = "***" if option.secret and option.default else option.default
        if option.name == "node_id":
            default = "random UUID"
        group.add_argument(
            option.flag,
            dest=option.name,
            default=None,
            metavar=option.name.upper().split("_")[-1] if option.choices is None else None,
            choices=None,
            help=f"{option.help} [env {option.env}; default {default!r}]",
        )
    for kind in ("kafka", "consumer", "producer"):
        group.add_argument(
            f"--{kind}-property",
            dest=f"{kind}_property",
            action="append",
            metavar="NAME=VALUE",
            help=(
                f"librdkafka property for {'all clients' if kind == 'kafka' else kind + 's'} "
                f"(repeatable) [env {KAFKA_PASSTHROUGH_PREFIXES[kind]}<NAME_WITH_UNDERSCORES>]"
            ),
        )


def load(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build Settings from CLI args, the environment and defaults (in that precedence).

    Raises ConfigError naming the offending flag or variable.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for option in OPTIONS:
        flag_value = getattr(args, option.name, None) if args is not None else None
        if option.name in overrides:
            values[option.name] = overrides[option.name]
        elif flag_value is not None:
            values[option.name] = _parse_option(option, flag_value, option.flag)
        elif option.env in env:
            values[option.name] = _parse_option(option, env[option.env], option.env)
        else:
            values[option.name] = _parse_option(option, str(option.default), option.env)
    for kind, prefix in KAFKA_PASSTHROUGH_PREFIXES.items():
        props = _passthrough_from_env(env, prefix)
        flag_items = getattr(args, f"{kind}_property", None) if args is not None else None
        props.update(_passthrough_from_flags(flag_items, f"--{kind}-property"))
        values[f"{kind}_properties"] = overrides.get(f"{kind}_properties", props)
    unknown = [
        key
        for key in env
        if key.startswith(ENV_PREFIX)
        and not any(key.startswith(p) for p in KAFKA_PASSTHROUGH_PREFIXES.values())
        and key[len(ENV_PREFIX) :].lower() not in OPTIONS_BY_NAME
        and not key.startswith(("CHRONOS_TEST_", "CHRONOS_DEV_", "CHRONOS_FAULT_"))
    ]
    if unknown:
        raise ConfigError(
            f"unknown setting {sorted(unknown)[0]}: known settings are "
            + ", ".join(o.env for o in OPTIONS)
        )
    return Settings(**values)


def as_environment(settings: Settings) -> dict[str, str]:
    """The CHRONOS_* environment that reproduces ``settings`` in another process."""
    env: dict[str, str] = {}
    for option in OPTIONS:
        value = getattr(settings, option.name)
        env[option.env] = value.reveal() if isinstance(value, Secret) else str(value)
    for kind, prefix in KAFKA_PASSTHROUGH_PREFIXES.items():
        for name, value in getattr(settings, f"{kind}_properties").items():
            revealed = value.reveal() if isinstance(value, Secret) else value
            env[prefix + name.upper().replace(".", "_")] = revealed
    return env
