"""The checks a node's settings pass before it starts: each refusal names the setting (its
environment variable and flag) and why the value cannot work. See docs/configuration.md."""

from __future__ import annotations

from chronos.config.declarations import Settings
from chronos.config.shards import parse_shard_map, split_urls
from chronos.config.values import POSTGRES_URL_PREFIXES
from chronos.errors import ConfigError
from chronos.protocol import RELAYED_INSTANT_HEADER

# Three heartbeat intervals (1 s each): see chronos.cluster.leadership.
MIN_LIVENESS_WINDOW_MS = 3000

# Producer properties at-least-once depends on, and the values a passthrough may give them.
AT_LEAST_ONCE_PRODUCER = {
    "enable.idempotence": {"true"},
    "acks": {"all", "-1"},
}

# librdkafka properties that a Chronos setting owns: through a passthrough they would replace
# the setting's validated value (a delivery timeout beyond the hold time's budget lets a peer
# fire a row a healthy node is still delivering). Set the setting instead.
OWNED_PROPERTIES = {
    "delivery.timeout.ms": "CHRONOS_DELIVERY_TIMEOUT_MS",
    "message.timeout.ms": "CHRONOS_DELIVERY_TIMEOUT_MS",  # librdkafka's other name for it
    "bootstrap.servers": "CHRONOS_KAFKA_BOOTSTRAP_SERVERS",
    "metadata.broker.list": "CHRONOS_KAFKA_BOOTSTRAP_SERVERS",
    "group.id": "CHRONOS_CONSUMER_GROUP",
    "group.instance.id": "CHRONOS_GROUP_INSTANCE_ID",
    "group.protocol": "CHRONOS_GROUP_PROTOCOL",
}

# Consumer properties of the classic group protocol that librdkafka refuses with
# group.protocol=consumer (KIP-848: the broker owns the session, heartbeats and assignment).
CLASSIC_GROUP_PROPERTIES = (
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
)

# A row's publish attempts are a smallint and it is parked after 2 x max_publish_attempts.
MAX_PUBLISH_ATTEMPTS = 32767 // 2


def validate(settings: Settings, *, require_database: bool = True) -> Settings:
    """The settings, checked: ConfigError names the first one that cannot work."""
    check(settings, require_database=require_database)
    return settings


def check(settings: Settings, *, require_database: bool = True) -> None:
    """Raise ConfigError for the first setting (or combination) that cannot work."""
    if require_database and not settings.database_url:
        raise ConfigError("database_url is required: set CHRONOS_DATABASE_URL or --database-url")
    check_shards(settings)
    budget = settings.lookahead_ms + settings.delivery_timeout_ms + settings.poll_interval_ms
    if budget >= settings.hold_time_ms:
        raise ConfigError(
            "CHRONOS_HOLD_TIME_MS / --hold-time-ms "
            f"({settings.hold_time_ms}) must exceed lookahead_ms + delivery_timeout_ms + "
            f"poll_interval_ms ({budget}); otherwise peers would take over messages "
            "a healthy node is still firing"
        )
    if settings.liveness_window_ms < MIN_LIVENESS_WINDOW_MS:
        raise ConfigError(
            "CHRONOS_LIVENESS_WINDOW_MS / --liveness-window-ms "
            f"({settings.liveness_window_ms}) must be at least {MIN_LIVENESS_WINDOW_MS}: a node "
            "writes its heartbeat every second and stops firing a second before the window "
            "ends, so a shorter window would take healthy nodes for dead"
        )
    relayed = [h for h in (settings.relay_id_header, settings.relay_deadline_header) if h]
    if len(set(relayed)) < len(relayed):
        raise ConfigError(
            "CHRONOS_RELAY_ID_HEADER and CHRONOS_RELAY_DEADLINE_HEADER name the same header "
            f"({relayed[0]!r}): give them two names"
        )
    if settings.relay_id_header == RELAYED_INSTANT_HEADER and not settings.relay_deadline_header:
        raise ConfigError(
            f"CHRONOS_RELAY_ID_HEADER ({RELAYED_INSTANT_HEADER!r}) is the header the scheduled "
            "instant is relayed under beside the id: name another, or set "
            "CHRONOS_RELAY_DEADLINE_HEADER"
        )
    for env, name in (
        ("CHRONOS_RELAY_ID_HEADER", settings.relay_id_header),
        ("CHRONOS_RELAY_DEADLINE_HEADER", settings.relay_deadline_header),
    ):
        if name and (name != name.strip() or not name.isprintable()):
            raise ConfigError(f"{env} ({name!r}) must be a header name without spaces around it")
    if settings.statement_timeout_ms >= settings.hold_time_ms:
        raise ConfigError(
            "CHRONOS_STATEMENT_TIMEOUT_MS / --statement-timeout-ms "
            f"({settings.statement_timeout_ms}) must be below the hold time "
            f"({settings.hold_time_ms}): a longer claim statement would return rows "
            "that peers already took over"
        )
    if settings.liveness_timeout_ms <= settings.effective_statement_timeout_ms + 5000:
        raise ConfigError(
            f"CHRONOS_LIVENESS_TIMEOUT_MS / --liveness-timeout-ms ({settings.liveness_timeout_ms})"
            " must exceed the statement timeout "
            f"({settings.effective_statement_timeout_ms} ms) by more than the 5 s retry backoff"
        )
    if settings.max_publish_attempts > MAX_PUBLISH_ATTEMPTS:
        raise ConfigError(
            "CHRONOS_MAX_PUBLISH_ATTEMPTS / --max-publish-attempts "
            f"({settings.max_publish_attempts}) must be at most {MAX_PUBLISH_ATTEMPTS}: a row is "
            "parked after twice as many attempts, counted in a smallint"
        )
    for source, props in (
        ("CHRONOS_PRODUCER__ / --producer-property", settings.producer_properties),
        ("CHRONOS_KAFKA__ / --kafka-property", settings.kafka_properties),
        ("CHRONOS_CONSUMER__ / --consumer-property", settings.consumer_properties),
    ):
        for raw_name in props:
            owner = OWNED_PROPERTIES.get(raw_name.strip().lower())
            if owner is not None:
                env = source.split(" ")[0] + raw_name.strip().upper().replace(".", "_")
                raise ConfigError(
                    f"{env} / {source.split(' / ')[1]} {raw_name} is refused: it would override "
                    f"{owner}, which Chronos checks and sets on its clients; set {owner} instead"
                )
        if settings.group_protocol == "consumer" and "PRODUCER" not in source:
            for raw_name in props:
                if raw_name.strip().lower() in CLASSIC_GROUP_PROPERTIES:
                    env = source.split(" ")[0] + raw_name.strip().upper().replace(".", "_")
                    raise ConfigError(
                        f"{env} / {source.split(' / ')[1]} {raw_name} is refused with "
                        "CHRONOS_GROUP_PROTOCOL=consumer: with that protocol the broker owns the "
                        "session timeout, heartbeats and assignment (group.consumer.* broker "
                        "settings); remove it or use CHRONOS_GROUP_PROTOCOL=classic"
                    )
        if "CONSUMER" in source:
            continue
        for name in ("linger.ms", "queue.buffering.max.ms"):  # the producer refuses to start
            try:
                linger = float(str(props.get(name, "0")))  # librdkafka takes fractions
            except ValueError:
                linger = float("nan")
            if not 0 <= linger < settings.delivery_timeout_ms:
                env = source.split(" ")[0] + name.upper().replace(".", "_")
                raise ConfigError(
                    f"{env} / {source.split(' / ')[1]} {name}={props[name]!r} must be a number "
                    f"of milliseconds below CHRONOS_DELIVERY_TIMEOUT_MS "
                    f"({settings.delivery_timeout_ms})"
                )
        for name, allowed in AT_LEAST_ONCE_PRODUCER.items():
            if name in props and str(props[name]).strip().lower() not in allowed:
                env = source.split(" ")[0] + name.upper().replace(".", "_")
                raise ConfigError(
                    f"{env} / {source.split(' / ')[1]} {name}={props[name]!r} is refused: "
                    f"Chronos needs {name}={sorted(allowed)[0]} for at-least-once delivery"
                )
    if settings.admin_port and not settings.http_port:
        raise ConfigError(
            f"CHRONOS_ADMIN_PORT / --admin-port ({settings.admin_port}) needs the HTTP server: "
            "CHRONOS_HTTP_PORT is 0, which runs the node without one"
        )
    if settings.admin_port and settings.admin_port == settings.http_port:
        raise ConfigError(
            f"CHRONOS_ADMIN_PORT / --admin-port ({settings.admin_port}) must differ from "
            "CHRONOS_HTTP_PORT, which serves health and metrics (0: the admin API on the HTTP "
            "port)"
        )
    topics = {settings.input_topic, settings.output_topic}
    if len(topics) != 2:
        raise ConfigError("CHRONOS_INPUT_TOPIC and CHRONOS_OUTPUT_TOPIC must differ")
    if settings.dead_letter_topic in topics:
        raise ConfigError("CHRONOS_DEAD_LETTER_TOPIC must differ from the input and output topics")
    if settings.audit_topic and settings.audit_topic in {*topics, settings.dead_letter_topic}:
        raise ConfigError(
            "CHRONOS_AUDIT_TOPIC must differ from the input, output and dead-letter topics"
        )
    if not settings.kafka_bootstrap_servers:
        raise ConfigError("CHRONOS_KAFKA_BOOTSTRAP_SERVERS must not be empty")


def check_shards(settings: Settings) -> None:
    """The databases' URLs (one per shard), the migration's (none, or as many) and the map."""
    urls = split_urls(settings.database_url.reveal())
    migration = split_urls(settings.migration_database_url.reveal())
    for name, given in (
        ("CHRONOS_DATABASE_URL", urls),
        ("CHRONOS_MIGRATION_DATABASE_URL", migration),
    ):
        flag = "--" + name.removeprefix("CHRONOS_").lower().replace("_", "-")
        for url in given:
            if not url.startswith(POSTGRES_URL_PREFIXES):
                raise ConfigError(
                    f"{name} / {flag} must be postgresql:// URLs (several: one per shard, "
                    "separated by spaces)"
                )
    if migration and urls and len(migration) != len(urls):
        raise ConfigError(
            f"CHRONOS_MIGRATION_DATABASE_URL names {len(migration)} databases and "
            f"CHRONOS_DATABASE_URL {len(urls)}: one each per shard, in the same order"
        )
    try:
        parse_shard_map(settings.shard_map, max(len(urls), len(migration), 1))
    except ValueError as exc:
        raise ConfigError(f"CHRONOS_SHARD_MAP / --shard-map: {exc}") from None
