"""``chronos admin dead-letters`` and ``chronos admin replay``: the dead-letter topic from the
command line (chronos.admin.deadletters.topic).

chronos admin dead-letters [--reason CODE] [--limit N] [--json]
    the dead letters, oldest first: where (partition:offset), when, code, source, reason,
    whether it was replayed, the original headers' names
chronos admin replay --reason CODE | --record PARTITION:OFFSET ... [--dry-run]
    replay them to the input topic, once each (chronos.admin.deadletters.replay: a malformed
    record as it came, a scheduled message's due now to its own topic); progress and the
    records refused (with why) on standard error, the totals on standard output

They read and write Kafka directly, with the Kafka connection settings (as ``chronos tail``),
not the admin API: no node needs to be up, and a replay of thousands of records is not one
HTTP request. Exit status: 0 done, 1 a record was refused, the broker refused or could not be
reached, or another replay took the topic over; 2 a bad flag or setting (named).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from chronos.admin.deadletters.replay import Progress, Replayer
from chronos.admin.deadletters.topic import (
    DeadLetter,
    DeadLetterTopic,
    ReplayError,
    parse_position,
)
from chronos.admin.output import table
from chronos.config import settings
from chronos.observability.logs import escape

COMMANDS = ("dead-letters", "replay")
COLUMNS = ("at", "when", "code", "source", "replayed", "reason", "headers")


def _position(raw: str) -> tuple[int, int]:
    try:
        return parse_position(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError(f"{raw!r} must be a whole number >= 1")
    return int(raw)


def add_parsers(commands: Any) -> None:
    """Add ``dead-letters`` and ``replay`` to the ``chronos admin`` actions."""
    only = (*settings.KAFKA_CLIENT_SETTINGS, "dead_letter_topic", "input_topic")
    listing = commands.add_parser(
        "dead-letters", help="list the dead-letter topic (reason, code, source, headers, when)"
    )
    listing.add_argument("--reason", metavar="CODE", default=None, help="only this reason code")
    listing.add_argument(
        "--limit", type=_limit, default=100, help="at most this many, oldest first (100)"
    )
    listing.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    settings.add_arguments(listing, only=only)

    replay = commands.add_parser(
        "replay",
        help="replay dead letters to the input topic (a scheduled message's due now), once each",
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--reason", metavar="CODE", default=None, help="every record of a code")
    which.add_argument(
        "--record",
        type=_position,
        action="append",
        metavar="PARTITION:OFFSET",
        help="this record (repeatable)",
    )
    replay.add_argument(
        "--dry-run", action="store_true", help="count what would be replayed, replay nothing"
    )
    replay.add_argument("--json", action="store_true", help="print the totals as JSON")
    settings.add_arguments(replay, only=only)


def run(config: settings.Settings, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from confluent_kafka import KafkaException

    try:
        with DeadLetterTopic(config) as dlq:
            if args.admin_command == "dead-letters":
                _list(dlq, args, out)
                return 0
            return _replay(dlq, args, out)
    except KafkaException as exc:  # the broker is unreachable or refused: said, exit 1
        raise ReplayError(f"Kafka at {config.kafka_bootstrap_servers}: {exc.args[0]}") from None


def _list(dlq: DeadLetterTopic, args: argparse.Namespace, out: TextIO) -> None:
    found: list[DeadLetter] = []
    done: set[tuple[int, int]] = set()
    for letter in dlq.scan():
        done |= {(letter.partition, offset) for offset in letter.marks}
        if letter.is_marker or len(found) >= args.limit:
            continue  # read on: a later marker may name a listed record
        if args.reason is None or letter.code == args.reason:
            found.append(letter)
    found.sort(key=lambda d: (d.timestamp_ms, d.partition, d.offset))
    rows = [(d, (d.partition, d.offset) in done) for d in found]
    if args.json:
        payload = {"topic": dlq.topic, "dead_letters": [d.json(r) for d, r in rows]}
        print(json.dumps(payload, indent=2), file=out)
        return

    print(
        table(
            [
                {
                    "at": d.position,
                    "when": d.when,
                    "code": d.code,
                    "source": d.source,
                    "replayed": replayed,
                    "reason": d.reason[:80],
                    "headers": ", ".join(name for name, _ in d.headers) or None,
                }
                for d, replayed in rows
            ],
            COLUMNS,
        ),
        file=out,
    )
    if len(found) >= args.limit:
        print(f"(the first {args.limit}; --limit for more)", file=out)


def _replay(dlq: DeadLetterTopic, args: argparse.Namespace, out: TextIO) -> int:
    shown = 0  # refusals printed so far

    def report(progress: Progress) -> None:
        nonlocal shown
        for at, why in progress.refusals[shown:]:
            print(f"refused {at}: {escape(why)}", file=sys.stderr)
        shown = len(progress.refusals)
        verb = "would replay" if args.dry_run else "replayed"
        print(
            f"{verb} {progress.replayed}, already replayed {progress.skipped}, "
            f"refused {progress.refused}, looked at {progress.scanned}",
            file=sys.stderr,
            flush=True,
        )

    replayer = Replayer(dlq, report)
    if args.reason is not None:
        progress = replayer.by_code(args.reason, dry_run=args.dry_run)
    else:
        progress = replayer.chosen(args.record, dry_run=args.dry_run)
    totals = {
        "topic": dlq.topic,
        "to": dlq.settings.input_topic,
        "reason": args.reason,
        "dry_run": args.dry_run,
        "replayed": progress.replayed,
        "already_replayed": progress.skipped,
        "looked_at": progress.scanned,
        "refused": progress.refused,
        "refusals": [{"record": at, "reason": why} for at, why in progress.refusals],
    }
    if args.json:
        print(json.dumps(totals), file=out)
    else:
        verb = "would replay" if args.dry_run else "replayed"
        refused = f", {progress.refused} refused" if progress.refused else ""
        print(
            f"{verb} {progress.replayed} records to {escape(dlq.settings.input_topic)} "
            f"({progress.skipped} already replayed{refused})",
            file=out,
        )
    return 1 if progress.refused else 0
