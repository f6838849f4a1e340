"""The ``chronos`` command line.

chronos run        run one node
chronos migrate    upgrade the schema to the latest version (or --to REVISION, or --downgrade)
chronos dev        the whole system on one machine: embedded Postgres, embedded Apache Kafka,
                   migrations, topics and N nodes (each its own process)
chronos schedule   publish a message to the input topic, due N seconds from now
chronos tail       print what arrives on the output (or dead-letter) topic
chronos admin      the admin API from the command line (chronos.admin.cli)
chronos import     schedule every row of a JSON Lines or Parquet file
"""

from __future__ import annotations

import argparse
import logging
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

from chronos import __version__
from chronos.config import settings
from chronos.errors import ChronosError, ConfigError
from chronos.observability import logs

log = logging.getLogger("chronos")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chronos", description="Chronos: a persistent time-delay scheduler for Kafka."
    )
    parser.add_argument("--version", action="version", version=f"chronos {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one node")
    settings.add_arguments(run)

    migrate = sub.add_parser("migrate", help="upgrade (or downgrade) the database schema")
    migrate.add_argument("--to", default="head", help="target revision (default: head)")
    migrate.add_argument(
        "--downgrade", action="store_true", help="downgrade to --to (default then: base)"
    )
    settings.add_arguments(migrate)

    dev = sub.add_parser("dev", help="run the whole system on embedded defaults")
    from chronos.embedded import dev as dev_module

    dev_module.add_dev_arguments(dev)
    settings.add_arguments(dev)

    schedule = sub.add_parser("schedule", help="publish a message due N seconds from now")
    schedule.add_argument(
        "--in",
        dest="delay",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="delay in seconds (default 5)",
    )
    schedule.add_argument("--id", default=None, help="chronosMessageId (default: a new UUID)")
    schedule.add_argument("--key", default=None, help="record key (UTF-8)")
    schedule.add_argument("--value", default="hello from chronos", help="record value (UTF-8)")
    schedule.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra header, relayed as-is (repeatable)",
    )
    schedule.add_argument("--count", type=int, default=1, help="how many messages (default 1)")
    settings.add_arguments(schedule)

    importer = sub.add_parser(
        "import",
        help="schedule every row of a JSON Lines or Parquet file (id, deadline|delay, "
        "key, value, headers)",
    )
    importer.add_argument("file", help="a .jsonl or .parquet file")
    settings.add_arguments(importer)

    check = sub.add_parser(
        "check",
        help="check the configuration against Postgres and the broker, one line per check "
        "(exit 0 only when all pass)",
    )
    check.add_argument("--json", action="store_true", help="print the checks as JSON")
    settings.add_arguments(check)

    tail = sub.add_parser("tail", help="print records arriving on the output topic")
    tail.add_argument("--dead-letter", action="store_true", help="tail the dead-letter topic")
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    tail.add_argument("--max", type=int, default=0, help="stop after this many records")
    settings.add_arguments(tail)

    from chronos.admin import cli as admin_cli

    admin_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "admin":
        from chronos.admin import cli as admin_cli

        return admin_cli.run(args)
    secrets: list[str] = []
    try:
        config = settings.load(args)
        secrets = settings.secret_values(config)
        # A node's records carry its node id, as its intake process's do.
        node = config.node_id if args.command == "run" else None
        logs.configure(config.log_level, config.log_format, node=node, secrets=secrets)
        if args.command == "run":
            from chronos.node.supervisor import run_node

            return run_node(config.validate())
        if args.command == "migrate":
            # The migration may run with its own (schema-owning) role and URL only.
            return _migrate(
                config.validate(require_database=not config.migration_database_url), args
            )
        if args.command == "dev":
            from chronos.embedded import dev as dev_module

            return dev_module.run_dev(args)
        if args.command == "schedule":
            return _schedule(config.validate(require_database=False), args)
        if args.command == "import":
            from pathlib import Path

            from chronos.importer import run_import

            result = run_import(config.validate(require_database=False), Path(args.file))
            print(f"imported {result.rows} rows ({result.rate:,.0f} rows/s)")
            return 0
        if args.command == "check":
            from chronos import preflight

            return preflight.report(preflight.run_checks(config.validate()), args.json, sys.stdout)
        if args.command == "tail":
            return _tail(config.validate(require_database=False), args)
    except ConfigError as exc:
        print(f"chronos: configuration error: {logs.redact(str(exc), secrets)}", file=sys.stderr)
        return 2
    except ChronosError as exc:
        print(f"chronos: {logs.redact(str(exc), secrets)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    raise AssertionError(f"unhandled command {args.command}")


def _migrate(config: settings.Settings, args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from chronos.store import migrate

    url = config.effective_migration_database_url.reveal()
    try:
        if args.downgrade:
            target = "base" if args.to == "head" else args.to
            migrate.downgrade(url, target)
            print(f"chronos: schema downgraded to {target}")
        else:
            migrate.upgrade(url, args.to)
            print(f"chronos: schema upgraded to {args.to}")
    except SQLAlchemyError as exc:
        # e.g. a role without the rights to change the schema: say so without a traceback.
        raise ChronosError(
            f"migration failed: {getattr(exc, 'orig', None) or exc} "
            "(CHRONOS_MIGRATION_DATABASE_URL, else CHRONOS_DATABASE_URL, must own the schema)"
        ) from exc
    return 0


def _schedule(config: settings.Settings, args: argparse.Namespace) -> int:
    from chronos.kafka import make_publisher
    from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline

    publisher = make_publisher(config, "cli")
    extra = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--header {item!r} is invalid: expected NAME=VALUE")
        extra.append((name, value.encode()))
    errors: list[object] = []
    for n in range(args.count):
        message_id = (
            args.id
            if args.id and args.count == 1
            else (f"{args.id}-{n}" if args.id else str(uuid.uuid4()))
        )
        deadline = datetime.now(UTC) + timedelta(seconds=args.delay)
        headers = [
            (MESSAGE_ID_HEADER, message_id.encode()),
            (DEADLINE_HEADER, format_deadline(deadline).encode()),
            *extra,
        ]
        publisher.produce(
            config.input_topic,
            args.key.encode() if args.key is not None else None,
            args.value.encode(),
            headers,
            lambda err: errors.append(err) if err is not None else None,
        )
        print(f"scheduled {message_id} for {format_deadline(deadline)} on {config.input_topic}")
    remaining = publisher.flush(30)
    if errors or remaining:
        print(
            f"chronos: {len(errors) + remaining} messages not delivered: {errors[:1]}",
            file=sys.stderr,
        )
        return 1
    return 0


def _tail(config: settings.Settings, args: argparse.Namespace) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    topic = config.dead_letter_topic if args.dead_letter else config.output_topic
    from chronos.kafka import tail_consumer_config

    consumer = Consumer(tail_consumer_config(config, f"chronos-tail-{uuid.uuid4()}"))
    metadata = consumer.list_topics(topic, timeout=10)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        raise ConfigError(f"topic {topic!r} does not exist")
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(topic, p, start) for p in metadata.topics[topic].partitions])
    print(f"tailing {topic} (Ctrl-C to stop)", file=sys.stderr)
    seen = 0
    try:
        while not args.max or seen < args.max:
            record = consumer.poll(0.5)
            if record is None or record.error() is not None:
                continue
            seen += 1
            pairs = cast(list[tuple[str, bytes | None]], record.headers() or [])
            headers = ", ".join(
                f"{k}={v.decode(errors='replace') if v is not None else None}" for k, v in pairs
            )
            key = record.key()
            value = record.value()
            print(
                f"{datetime.now(UTC).isoformat(timespec='milliseconds')} "
                f"{topic}[{record.partition()}]@{record.offset()} "
                f"key={key.decode(errors='replace') if key is not None else None} "
                f"value={value.decode(errors='replace') if value is not None else None} "
                f"headers=[{headers}]",
                flush=True,
            )
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
