"""``chronos check``: what works and what does not with a node's configuration, one line each,
before anything is deployed (by hand, or as the chart's optional init container).

Each check prints ``ok`` or ``FAIL`` (or ``skip`` when what it needs failed first) with what it
found: Postgres reachable (and whether the connection is encrypted), the schema at the revision
this release expects, the grants the nodes' role needs; the broker reachable (with the security
protocol in use), each topic present and, where the broker reports authorized operations,
readable (input) or writable (output, dead-letter), and the consumer group usable. Exit status
0 only when every check passed; 1 otherwise; 2 for a bad setting (as every command). ``--json``
prints the same as a list of objects for machines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from chronos.config.settings import Settings
from chronos.config.shards import ShardMap
from chronos.errors import ChronosError, ConfigError

TABLES = (
    "chronos_messages",
    "chronos_nodes",
    "chronos_cancels",
    "chronos_tenants",
    "chronos_pauses",
    "chronos_limits",
)
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # "ok", "FAIL" or "skip"
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _short(error: object, limit: int = 300) -> str:
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__)[:limit]


# ------------------------------------------------------------------------------ Postgres


def check_postgres(settings: Settings) -> list[Check]:
    """Each shard's database (one: today's): reachable, migrated, granted, and recorded as the
    shard the settings make it."""
    from chronos.config.shards import layout

    urls, shard_map = layout(settings.database_url.reveal(), settings.shard_map)
    checks: list[Check] = []
    for shard, url in enumerate(urls):
        found = _check_database(url, shard, shard_map)
        if len(urls) > 1:
            found = [Check(f"{c.name} (shard {shard})", c.status, c.detail) for c in found]
        checks += found
    return checks


def _check_database(url: str, shard: int, shard_map: ShardMap) -> list[Check]:
    import psycopg

    from chronos.store.postgres.session import libpq_url

    try:
        conn = psycopg.connect(libpq_url(url), connect_timeout=int(TIMEOUT_S))
    except psycopg.Error as exc:
        failed = Check("postgres", "FAIL", f"cannot connect (CHRONOS_DATABASE_URL): {_short(exc)}")
        return [
            failed,
            Check("schema", "skip", "needs the database"),
            Check("grants", "skip", "needs the database"),
        ]
    with conn:
        info = conn.info
        tls = "TLS" if conn.pgconn.ssl_in_use else "no TLS"
        where = f"{info.host}:{info.port}/{info.dbname} as {info.user} ({tls})"
        checks = [Check("postgres", "ok", f"reachable at {where}"), _schema(conn), _grants(conn)]
        if shard_map.shards > 1:
            checks.append(_shard(conn, shard, shard_map))
        return checks


def _shard(conn: Any, shard: int, shard_map: ShardMap) -> Check:
    from chronos.config.shards import describe, record_mismatch

    present = conn.execute("SELECT to_regclass('chronos_shard') IS NOT NULL").fetchone()[0]
    row = (
        conn.execute("SELECT shard, shards, map FROM chronos_shard").fetchone() if present else None
    )
    mismatch = record_mismatch(row, shard, shard_map)
    if mismatch is not None:
        return Check("shard", "FAIL", mismatch)
    return Check("shard", "ok", f"recorded as {describe(shard, shard_map.shards, shard_map.spec)}")


def _schema(conn: Any) -> Check:
    from alembic.script import ScriptDirectory

    from chronos.store.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    try:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except Exception as exc:  # noqa: BLE001 - any driver error means "not migrated" here
        conn.rollback()
        return Check("schema", "FAIL", f"not migrated ({_short(exc)}): run `chronos migrate`")
    current = row[0] if row else None
    if current != head:
        return Check(
            "schema",
            "FAIL",
            f"at revision {current}, this release needs {head}: run `chronos migrate`",
        )
    return Check("schema", "ok", f"at revision {head}")


def _grants(conn: Any) -> Check:
    missing = []
    absent = [
        table
        for table in TABLES
        if conn.execute("SELECT to_regclass(%s) IS NULL", (table,)).fetchone()[0]
    ]
    if absent:
        return Check("grants", "skip", f"no table {', '.join(absent)} yet: run `chronos migrate`")
    for table in TABLES:
        for privilege in PRIVILEGES:
            row = conn.execute(
                "SELECT has_table_privilege(current_user, %s, %s)", (table, privilege)
            ).fetchone()
            if not (row and row[0]):
                missing.append(f"{privilege} on {table}")
    if missing:
        return Check("grants", "FAIL", "the role lacks " + ", ".join(missing))
    return Check("grants", "ok", f"{', '.join(PRIVILEGES)} on {', '.join(TABLES)}")


# ------------------------------------------------------------------------------ Kafka


def check_kafka(settings: Settings) -> list[Check]:
    from chronos.errors import BrokerUnreachableError
    from chronos.kafka import admin_config, reach_broker

    protocol = str(admin_config(settings).get("security.protocol", "plaintext")).upper()
    try:
        admin, metadata = reach_broker(settings, TIMEOUT_S)
    except (ConfigError, BrokerUnreachableError) as exc:
        # A refusal names the setting and the TLS or SASL error; silence is "cannot reach".
        failed = Check("kafka", "FAIL", f"{protocol}: {_short(exc, 800)}")
        skipped = [*_topic_checks(settings), "consumer group"]
        return [failed, *(Check(name, "skip", "needs the broker") for name in skipped)]
    checks = [
        Check(
            "kafka",
            "ok",
            f"reachable at {settings.kafka_bootstrap_servers} ({protocol}, "
            f"{len(metadata.brokers)} broker(s))",
        )
    ]
    checks += _topics(admin, metadata, settings)
    checks.append(_group(admin, settings))
    return checks


def _topic_checks(settings: Settings) -> dict[str, tuple[str, str, Any]]:
    from confluent_kafka.admin import AclOperation

    wanted = {
        "input topic": ("CHRONOS_INPUT_TOPIC", settings.input_topic, AclOperation.READ),
        "output topic": ("CHRONOS_OUTPUT_TOPIC", settings.output_topic, AclOperation.WRITE),
    }
    if settings.dead_letter_topic:
        wanted["dead-letter topic"] = (
            "CHRONOS_DEAD_LETTER_TOPIC",
            settings.dead_letter_topic,
            AclOperation.WRITE,
        )
    return wanted


def _topics(admin: Any, metadata: Any, settings: Settings) -> list[Check]:
    from confluent_kafka import KafkaException, TopicCollection

    from chronos.kafka import missing_operation

    checks = []
    for name, (env, topic, operation) in _topic_checks(settings).items():
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            why = info.error if info is not None and info.error is not None else "does not exist"
            checks.append(Check(name, "FAIL", f"{topic!r} ({env}): {why}"))
            continue
        detail = f"{topic!r}: {len(info.partitions)} partitions"
        try:
            described = admin.describe_topics(
                TopicCollection([topic]),
                request_timeout=TIMEOUT_S,
                include_authorized_operations=True,
            )[topic].result()
            allowed = described.authorized_operations
        except (KafkaException, ValueError, TypeError):
            allowed = None
        if missing_operation(allowed, operation):
            checks.append(
                Check(name, "FAIL", f"{detail}; this node may not {operation.name} it ({env})")
            )
            continue
        if allowed:
            detail += f", {operation.name} allowed"
        else:
            detail += " (the broker reports no permissions)"
        checks.append(Check(name, "ok", detail))
    return checks


def _group(admin: Any, settings: Settings) -> Check:
    from confluent_kafka import KafkaError, KafkaException

    group = settings.consumer_group
    try:
        (future,) = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S).values()
        described = future.result()
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return Check("consumer group", "FAIL", f"{group!r} (CHRONOS_CONSUMER_GROUP): {err}")
        return Check(
            "consumer group", "ok", f"{group!r} (the broker could not describe it: {_short(exc)})"
        )
    members = len(getattr(described, "members", []) or [])
    return Check("consumer group", "ok", f"{group!r}: {members} member(s) now")


# ------------------------------------------------------------------------------ the command


def run_checks(
    settings: Settings,
    checkers: Sequence[Callable[[Settings], list[Check]]] = (check_postgres, check_kafka),
) -> list[Check]:
    checks: list[Check] = []
    for checker in checkers:
        try:
            checks += checker(settings)
        except ChronosError as exc:  # pragma: no cover - a checker reports, it does not raise
            checks.append(Check(checker.__name__, "FAIL", _short(exc)))
    return checks


def report(checks: Sequence[Check], as_json: bool, out: TextIO) -> int:
    if as_json:
        out.write(json.dumps([asdict(c) for c in checks], indent=2) + "\n")
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            out.write(f"{c.status:<4}  {c.name:<{width}}  {c.detail}\n")
    return 0 if all(c.ok for c in checks) else 1
