"""The producer's commands: ``chronos schedule``, ``chronos cancel``, ``chronos reschedule`` and
``chronos tail``.

They talk to Kafka only (never to the database): their flags are their own and the Kafka
connection's (bootstrap servers, OAUTHBEARER, the pass-through properties that carry TLS and
SASL), not a node's settings. The records are written by ``chronos.client``, as an application
would write them.

chronos schedule [ID] [--at INSTANT | --in DURATION] [--every DURATION | --cron EXPR]
                 [--time-zone ZONE] [--until INSTANT] [--expires DURATION|INSTANT]
                 [--tenant NAME] [--topic TARGET] [--header NAME=VALUE ...] [--id ID]
                 [--key KEY] [--value VALUE] [--count N]
chronos reschedule ID  (the same options but --count)
chronos cancel ID [--key KEY]
chronos tail [--dead-letter | --audit] [--from-beginning] [--max N]

A duration is seconds (``90``, ``1.5``), a number with a unit (``500ms``, ``30s``, ``5m``,
``2h``, ``1d``) or ISO-8601 (``PT5M``): the grammar of every duration flag
(``chronos.config.flags.duration``, ``chronos admin`` too); an instant is ISO-8601 (no offset:
UTC). ``cancel`` and ``reschedule`` write a record to the input topic: no node's admin API is
involved (``chronos admin cancel`` and ``reschedule`` act through it instead).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from chronos import client
from chronos.config import flags, settings
from chronos.config.flags import described
from chronos.errors import ChronosError, ConfigError
from chronos.protocol import RELAYED_INSTANT_HEADER, DeadlineError, parse_deadline

DEFAULT_DELAY = timedelta(seconds=5)
duration = flags.duration  # the one grammar of every duration flag (chronos admin's too)


# ---------------------------------------------------------------------------------- parsing


def instant(raw: str) -> datetime:
    """An ISO-8601 instant; without an offset it is UTC (as the message protocol's)."""
    try:
        return parse_deadline(raw.strip())
    except DeadlineError as exc:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not an ISO-8601 instant (e.g. 2030-01-02T03:04:05Z): {exc}"
        ) from None


def expiry(raw: str) -> timedelta | datetime:
    """``--expires``: a duration after the deadline, or an instant."""
    try:
        return duration(raw)
    except argparse.ArgumentTypeError:
        pass
    try:
        return instant(raw)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is neither a duration (30s, PT30S) nor an ISO-8601 instant"
        ) from None


def header(raw: str) -> tuple[str, str]:
    name, sep, value = raw.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{raw!r} is not NAME=VALUE")
    return name, value


# ---------------------------------------------------------------------------------- parsers


def add_parsers(sub: Any) -> None:
    """Add ``schedule``, ``reschedule``, ``cancel`` and ``tail`` to the ``chronos`` commands."""
    schedule = sub.add_parser(
        "schedule",
        help="publish a message (one-shot or a series) to the input topic",
        description="Publish a message to the input topic: due --at an instant or --in a "
        "duration (default: 5s), or a series (--every, --cron).",
        usage="chronos schedule [-h] [ID] [--at INSTANT | --in DURATION] [OPTIONS]",
    )
    schedule.add_argument(
        "given_id", nargs="?", default=None, metavar="ID", help="chronosMessageId (as --id)"
    )
    schedule.add_argument("--id", default=None, help=described("chronosMessageId", "a new UUID"))
    _message_arguments(schedule)
    schedule.add_argument(
        "--count", type=int, default=1, metavar="N", help=described("how many messages", 1)
    )
    _kafka_arguments(schedule, "input_topic")

    reschedule = sub.add_parser(
        "reschedule",
        help="replace a waiting message (deadline, series, key, value, headers): a record on "
        "the input topic",
        description="Replace the waiting message ID (or schedule it if there is none) with a "
        "record on the input topic, written to Kafka: it carries chronosAction: reschedule and "
        "the whole new message. (chronos admin reschedule moves a deadline through a node's "
        "admin API instead.)",
        usage="chronos reschedule [-h] ID [--at INSTANT | --in DURATION] [OPTIONS]",
    )
    reschedule.add_argument("id", metavar="ID", help="chronosMessageId")
    _message_arguments(reschedule)
    _kafka_arguments(reschedule, "input_topic")

    cancel = sub.add_parser(
        "cancel",
        help="cancel a waiting message (or series) by its id: a record on the input topic",
        description="Cancel the waiting message (or series) ID with a chronosAction: cancel "
        "record on the input topic, written to Kafka: no node needs to answer, and a schedule "
        "of ID arriving later is dropped too. (chronos admin cancel acts through a node's "
        "admin API instead, and can cancel by filter.)",
        usage="chronos cancel [-h] [--help-all] [--key KEY] [SETTING FLAGS] ID",
    )
    cancel.add_argument("id", metavar="ID", help="chronosMessageId")
    cancel.add_argument(
        "--key", default=None, help="the key it was scheduled with (same partition, UTF-8)"
    )
    _kafka_arguments(cancel, "input_topic")

    tail = sub.add_parser(
        "tail",
        help="print records arriving on the output (or dead-letter, or audit) topic",
        description="Print each record: its own timestamp and type (CreateTime: when the node "
        "handed it to its producer; LogAppendTime: when the broker wrote it), and its lateness "
        "against the instant it was scheduled for, read from the header "
        "CHRONOS_RELAY_DEADLINE_HEADER names (else chronosScheduledFor, which chronos dev's "
        "nodes relay). With --audit: each audit event, one JSON object a line.",
        usage="chronos tail [-h] [--help-all] [--dead-letter | --audit] [--from-beginning] "
        "[--max N] [SETTING FLAGS]",
    )
    which = tail.add_mutually_exclusive_group()
    which.add_argument("--dead-letter", action="store_true", help="tail the dead-letter topic")
    which.add_argument(
        "--audit",
        action="store_true",
        help="tail the audit topic (CHRONOS_AUDIT_TOPIC): one JSON event a line",
    )
    tail.add_argument("--from-beginning", action="store_true", help="start at the oldest record")
    tail.add_argument(
        "--max",
        type=int,
        default=0,
        metavar="N",
        help=described("stop after N records", "0: never"),
    )
    _kafka_arguments(
        tail,
        "output_topic",
        "dead_letter_topic",
        "relay_deadline_header",
        "audit_topic",
        consumes=True,
    )


# The settings a producer command's --help shows besides its topic: the broker and the
# pass-through properties (TLS, SASL); its other settings' flags are behind --help-all.
KAFKA_SHOWN = ("kafka_bootstrap_servers", "kafka_property", "producer_property")


def _kafka_arguments(
    parser: argparse.ArgumentParser, topic: str, *others: str, consumes: bool = False
) -> None:
    names = (*settings.KAFKA_CLIENT_SETTINGS, topic, *others)
    shown = (*KAFKA_SHOWN, topic, *(["consumer_property"] if consumes else []))
    settings.add_arguments(parser, only=names, shown=shown)


def _message_arguments(parser: argparse.ArgumentParser) -> None:
    when = parser.add_argument_group("when")
    start = when.add_mutually_exclusive_group()
    start.add_argument(
        "--at", type=instant, default=None, metavar="INSTANT", help="the deadline, ISO-8601"
    )
    start.add_argument(
        "--in",
        dest="delay",
        type=duration,
        default=None,
        metavar="DURATION",
        help="the deadline from now: seconds, 500ms, 30s, 5m, 2h, 1d or PT5M (default: 5s; a "
        "series without --at/--in: its rule's first occurrence)",
    )
    rule = when.add_mutually_exclusive_group()
    rule.add_argument(
        "--every", type=duration, default=None, metavar="DURATION", help="a series: every DURATION"
    )
    rule.add_argument(
        "--cron", default=None, metavar="EXPR", help="a series: five cron fields, '0 9 * * 1-5'"
    )
    when.add_argument(
        "--time-zone", default=None, metavar="ZONE", help=described("the cron's IANA zone", "UTC")
    )
    when.add_argument(
        "--until",
        type=instant,
        default=None,
        metavar="INSTANT",
        help="a series: no occurrence after this instant",
    )
    when.add_argument(
        "--missed",
        choices=("latest", "all"),
        default=None,
        help=described("a series' missed occurrences", "latest"),
    )
    when.add_argument(
        "--expires",
        type=expiry,
        default=None,
        metavar="DURATION|INSTANT",
        help="how late it may still fire: a duration after the deadline, or an instant",
    )
    what = parser.add_argument_group("what")
    what.add_argument("--key", default=None, help="record key (UTF-8)")
    what.add_argument(
        "--value",
        default="hello from chronos",
        help=described("record value (UTF-8)", "hello from chronos"),
    )
    what.add_argument(
        "--header",
        type=header,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra header, relayed as-is (repeatable)",
    )
    what.add_argument(
        "--tenant", default=None, metavar="NAME", help="chronosTenant: the message's tenant"
    )
    what.add_argument(
        "--topic",
        dest="target_topic",
        default=None,
        metavar="TOPIC",
        help="chronosTopic: fire to this topic, not the output topic (CHRONOS_ALLOWED_TOPICS)",
    )


# ---------------------------------------------------------------------------------- commands


def repeat_of(args: argparse.Namespace) -> client.Repeat | None:
    """The series the flags describe (None: one-shot); ConfigError names the flag."""
    if args.every is None and args.cron is None:
        for flag, value in (("--time-zone", args.time_zone), ("--until", args.until)):
            if value is not None:
                raise ConfigError(f"{flag} is for a series: give --every or --cron too")
        if args.missed is not None:
            raise ConfigError("--missed is for a series: give --every or --cron too")
        return None
    try:
        return client.Repeat(
            every=args.every,
            cron=args.cron,
            time_zone=args.time_zone,
            until=args.until,
            missed=args.missed,
        )
    except ValueError as exc:
        flag = "--cron" if args.cron is not None else "--every"
        if "zone" in str(exc).lower():
            flag = "--time-zone"
        raise ConfigError(f"{flag}: {exc}") from None


def schedule_id(args: argparse.Namespace) -> str | None:
    """The id ``schedule`` was given, as ``ID`` or ``--id`` (None: a new one per message)."""
    given: str | None = getattr(args, "given_id", None)
    if given is not None and args.id is not None and given != args.id:
        raise ConfigError(f"two ids, {given!r} and --id {args.id!r}: give one")
    return given if given is not None else args.id


def message_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The client's arguments for the schedule/reschedule flags."""
    repeat = repeat_of(args)
    delay = args.delay
    if args.at is None and delay is None and repeat is None:
        delay = DEFAULT_DELAY
    return {
        "value": args.value.encode(),
        "key": args.key.encode() if args.key is not None else None,
        "deadline": args.at,
        "delay": delay,
        "headers": [(name, value.encode()) for name, value in args.header],
        "target_topic": args.target_topic,
        "repeat": repeat,
        "expires": args.expires,
        "tenant": args.tenant,
    }


def run(command: str, config: settings.Settings, args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        return _run(command, config, args)
    except KafkaException as exc:  # the broker is unreachable or refused: said, exit 1
        raise ChronosError(f"Kafka at {config.kafka_bootstrap_servers}: {exc.args[0]}") from None


def _run(command: str, config: settings.Settings, args: argparse.Namespace) -> int:
    if command == "tail":
        return tail(config, args)
    from confluent_kafka import Producer

    from chronos.kafka.config import producer_config

    producer = Producer(producer_config(config, "cli"))
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    sent = _produce(command, config, args, producer, delivered)
    remaining = producer.flush(30)
    if errors or remaining:
        print(
            f"chronos: {len(errors) + remaining} of {sent} records not delivered: {errors[:1]}",
            file=sys.stderr,
        )
        return 1
    return 0


def _produce(
    command: str,
    config: settings.Settings,
    args: argparse.Namespace,
    producer: client.Producer,
    delivered: Callable[[Any, Any], None],
) -> int:
    topic = config.input_topic
    try:
        if command == "cancel":
            client.cancel(producer, args.id, key=args.key, topic=topic, on_delivery=delivered)
            print(f"cancel of {args.id} sent to {topic}")
            return 1
        kwargs = message_kwargs(args)
        if command == "reschedule":
            kwargs = _fixed(kwargs)
            client.reschedule(
                producer, message_id=args.id, topic=topic, on_delivery=delivered, **kwargs
            )
            print(f"reschedule of {args.id} sent to {topic}{_when(kwargs)}")
            return 1
        given = schedule_id(args)
        for n in range(args.count):
            message_id = given if args.count == 1 else (f"{given}-{n}" if given else None)
            sent = _fixed(kwargs)
            message_id = client.schedule(
                producer, message_id=message_id, topic=topic, on_delivery=delivered, **sent
            )
            print(f"scheduled {message_id} on {topic}{_when(sent)}")
        return int(args.count)
    except ValueError as exc:  # the client refused a value the flags let through
        raise ConfigError(str(exc)) from None


def _fixed(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A delay made the deadline it gives now, so that what is printed is what is sent."""
    if kwargs["delay"] is None:
        return kwargs
    return {**kwargs, "deadline": client.deadline_of(None, kwargs["delay"]), "delay": None}


def _when(kwargs: dict[str, Any]) -> str:
    from chronos.protocol import format_deadline

    parts = []
    if kwargs["deadline"] is not None:
        parts.append(f" for {format_deadline(kwargs['deadline'])}")
    rule = kwargs["repeat"]
    if rule is not None:
        parts.append(f" repeating {rule.cron or 'every ' + str(rule.every)}")
    return "".join(parts)


# ---------------------------------------------------------------------------------- tail

TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def describe_timestamp(
    kind: int, ms: int, headers: list[tuple[str, bytes | None]], deadline_header: str
) -> str:
    """A record's own timestamp and its type, then its lateness against the scheduled instant
    the relay header carries (when it is configured and present)."""
    if kind not in TIMESTAMP_TYPES:
        text = "no-timestamp"
    else:
        stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
        text = f"{stamp.replace('+00:00', 'Z')} {TIMESTAMP_TYPES[kind]}"
    scheduled = next((v for n, v in headers if deadline_header and n == deadline_header), None)
    if scheduled is None or kind not in TIMESTAMP_TYPES:
        return text
    try:
        due = parse_deadline(scheduled.decode("ascii"))
    except (UnicodeDecodeError, DeadlineError):
        return text
    late_ms = ms - round(due.timestamp() * 1000)
    return f"{text} lateness={late_ms:+d}ms"


def scheduled_header(config: settings.Settings) -> str:
    """The header tail reads a record's scheduled instant from: the one configured, else the one
    Chronos relays it under beside an id (and chronos dev's nodes relay it under by default)."""
    return config.relay_deadline_header or RELAYED_INSTANT_HEADER


def tail(config: settings.Settings, args: argparse.Namespace) -> int:
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    from chronos.kafka.config import tail_consumer_config

    topic = config.dead_letter_topic if args.dead_letter else config.output_topic
    if args.audit:
        topic = config.audit_topic
        if not topic:
            raise ConfigError("CHRONOS_AUDIT_TOPIC is empty: name the audit topic to tail")
    if not topic:
        raise ConfigError("CHRONOS_DEAD_LETTER_TOPIC is empty: there is no dead-letter topic")
    consumer = Consumer(tail_consumer_config(config, f"chronos-tail-{uuid.uuid4()}"))
    metadata = consumer.list_topics(topic, timeout=10)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        raise ConfigError(f"topic {topic!r} does not exist")
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    scheduled_for = scheduled_header(config)
    consumer.assign([TopicPartition(topic, p, start) for p in metadata.topics[topic].partitions])
    print(f"tailing {topic} (Ctrl-C to stop)", file=sys.stderr)
    seen = 0
    try:
        while not args.max or seen < args.max:
            record = consumer.poll(0.5)
            if record is None or record.error() is not None:
                continue
            seen += 1
            if args.audit:  # the event as written: JSON, for people and for jq alike
                print((record.value() or b"").decode(errors="replace"), flush=True)
                continue
            pairs = cast(list[tuple[str, bytes | None]], record.headers() or [])
            headers = ", ".join(
                f"{k}={v.decode(errors='replace') if v is not None else None}" for k, v in pairs
            )
            kind, ms = record.timestamp()
            key = record.key()
            value = record.value()
            print(
                f"{describe_timestamp(kind, ms, pairs, scheduled_for)} "
                f"{topic}[{record.partition()}]@{record.offset()} "
                f"key={key.decode(errors='replace') if key is not None else None} "
                f"value={value.decode(errors='replace') if value is not None else None} "
                f"headers=[{headers}]",
                flush=True,
            )
    finally:
        consumer.close()
    return 0
