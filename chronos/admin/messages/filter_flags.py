"""The filter flags of ``chronos admin list``, ``cancel`` and ``reschedule`` (the admin API's
filters, chronos.admin.messages.filters) and the query parameters they become."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

STATES = ("waiting", "claimed", "parked")
ENDED_STATES = ("fired", "cancelled", "expired", "dead-lettered", "replaced", "ended")
"""The history's states, which ``list`` takes too (``ended``: any of them)."""
FILTER_FLAGS = ("tenant", "topic", "id_prefix", "key", "key_prefix", "recurring")


def timestamp(raw: str) -> datetime:
    """ISO-8601; without an offset it is UTC (as the message protocol's deadlines)."""
    try:
        value = datetime.fromisoformat(raw.strip().replace("z", "Z"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not an ISO-8601 timestamp (e.g. 2030-01-02T03:04:05Z)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def add_filter_flags(
    parser: argparse.ArgumentParser, *, state: bool = True, ended: bool = False
) -> None:
    """The filter flags (``--from``/``--to`` and ``--state`` included; ``ended``: the state may
    name the history's)."""
    group = parser.add_argument_group("filters (all must match)")
    if state:
        group.add_argument(
            "--state",
            choices=(*STATES, *ENDED_STATES) if ended else STATES,
            default=None,
            help="only this state"
            + (" (fired, cancelled, ...: ended messages, from the history)" if ended else ""),
        )
    group.add_argument("--tenant", default=None, help="only this tenant ('' : the default one)")
    group.add_argument(
        "--topic",
        default=None,
        help="only this target topic (the output topic also matches messages without one)",
    )
    group.add_argument("--id-prefix", default=None, help="only ids starting with this")
    keys = group.add_mutually_exclusive_group()
    keys.add_argument("--key", default=None, help="only this key (UTF-8 text, exact)")
    keys.add_argument("--key-prefix", default=None, help="only keys starting with this text")
    group.add_argument(
        "--recurring",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only series (--recurring) or only one-shot messages (--no-recurring)",
    )
    group.add_argument(
        "--from",
        dest="deadline_from",
        type=timestamp,
        default=None,
        metavar="INSTANT",
        help="deadline >= this",
    )
    group.add_argument(
        "--to",
        dest="deadline_to",
        type=timestamp,
        default=None,
        metavar="INSTANT",
        help="deadline < this",
    )


def filter_params(args: argparse.Namespace) -> dict[str, Any]:
    """The API's query parameters of the flags given (None: not given)."""
    key_prefix = getattr(args, "key_prefix", None)
    recurring = getattr(args, "recurring", None)
    return {
        "state": getattr(args, "state", None),
        "tenant": args.tenant,
        "topic": args.topic,
        "id_prefix": args.id_prefix,
        "key": args.key if args.key is not None else key_prefix,
        "key_prefix": "true" if key_prefix is not None else None,
        "recurring": None if recurring is None else ("true" if recurring else "false"),
        "deadline_from": args.deadline_from.isoformat() if args.deadline_from else None,
        "deadline_to": args.deadline_to.isoformat() if args.deadline_to else None,
    }


def narrowed(args: argparse.Namespace) -> bool:
    """A filter beyond the state is given (what a bulk action needs)."""
    params = filter_params(args)
    return any(v is not None for k, v in params.items() if k != "state")
