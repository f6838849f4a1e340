"""The checks a node's settings pass before it starts: each refusal names the setting (its
environment variable and flag) and why the value cannot work. See docs/configuration.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chronos.config.values import POSTGRES_URL_PREFIXES
from chronos.errors import ConfigError

if TYPE_CHECKING:
    from chronos.config.declarations import Settings

# Three heartbeat intervals (1 s each): see chronos.cluster.leadership.
MIN_LIVENESS_WINDOW_MS = 3000

# Producer properties at-least-once depends on, and the values a passthrough may give them.
AT_LEAST_ONCE_PRODUCER = {
    "enable.idempotence": {"true"},
    "acks": {"all", "-1"},
}


def check(settings: Settings, *, require_database: bool = True) -> None:
    """Raise ConfigError for the first setting (or combination) that cannot work."""
    if require_database and not settings.database_url:
        raise ConfigError("database_url is required: set CHRONOS_DATABASE_URL or --database-url")
    if settings.database_url and not settings.database_url.reveal().startswith(
        POSTGRES_URL_PREFIXES
    ):
        raise ConfigError("CHRONOS_DATABASE_URL / --database-url must be a postgresql:// URL")
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
    for source, props in (
        ("CHRONOS_PRODUCER__ / --producer-property", settings.producer_properties),
        ("CHRONOS_KAFKA__ / --kafka-property", settings.kafka_properties),
    ):
        for name, allowed in AT_LEAST_ONCE_PRODUCER.items():
            if name in props and str(props[name]).strip().lower() not in allowed:
                env = source.split(" ")[0] + name.upper().replace(".", "_")
                raise ConfigError(
                    f"{env} / {source.split(' / ')[1]} {name}={props[name]!r} is refused: "
                    f"Chronos needs {name}={sorted(allowed)[0]} for at-least-once delivery"
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
