"""``chronos admin pause``, ``resume`` and ``pauses``: flow control through the admin API
(``/admin/v1/pauses``, chronos.admin.flow.api).

chronos admin pause --tenant T | --topic X    pause a tenant ('' : the default) or target topic
chronos admin resume --tenant T | --topic X   resume it (exit 1 when it is not paused)
chronos admin pauses                          what is paused, since when, by whom
chronos admin limit --tenant T | --topic X --per-second N | --clear   set or remove a rate limit
chronos admin limits                          the rate limits
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TextIO

PAUSE_COLUMNS = ("kind", "name", "paused_at", "paused_by")
LIMIT_COLUMNS = ("kind", "name", "per_second", "set_at", "set_by")


class Client(Protocol):
    def request(
        self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any: ...


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    for action, text in (
        ("pause", "pause a tenant or a target topic cluster-wide: its messages wait"),
        ("resume", "resume a paused tenant or target topic"),
    ):
        parser = commands.add_parser(action, parents=[common], help=text)
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--tenant", default=None, help="a tenant ('' : the default tenant)")
        which.add_argument("--topic", default=None, help="a target topic")
    commands.add_parser("pauses", parents=[common], help="what is paused, since when, by whom")
    limit = commands.add_parser(
        "limit", parents=[common], help="rate-limit a tenant or a target topic cluster-wide"
    )
    which = limit.add_mutually_exclusive_group(required=True)
    which.add_argument("--tenant", default=None, help="a tenant ('' : the default tenant)")
    which.add_argument("--topic", default=None, help="a target topic")
    how = limit.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--per-second", type=_per_second, default=None, help="messages per second, cluster-wide"
    )
    how.add_argument("--clear", action="store_true", help="remove its limit")
    commands.add_parser("limits", parents=[common], help="the rate limits")


def _per_second(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of messages, 1 or more: {raw!r}")
    return int(raw)


def _target(args: argparse.Namespace) -> dict[str, str]:
    return {"tenant": args.tenant} if args.tenant is not None else {"topic": args.topic}


def _pause(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    answer = client.request("POST", "/pauses", _target(args))
    _emit(args, out, answer, f"paused {answer['kind']} {answer['name']!r}")


def _resume(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    answer = client.request("DELETE", "/pauses", _target(args))
    _emit(args, out, answer, f"resumed {answer['kind']} {answer['name']!r}")


def _pauses(
    table: Callable[[Sequence[Mapping[str, Any]], Sequence[str]], str],
) -> Callable[[Client, argparse.Namespace, TextIO], None]:
    def run(client: Client, args: argparse.Namespace, out: TextIO) -> None:
        answer = client.request("GET", "/pauses")
        rows = answer["pauses"]
        _emit(args, out, answer, table(rows, PAUSE_COLUMNS) if rows else "nothing is paused")

    return run


def _limit(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    if args.clear:
        answer = client.request("DELETE", "/limits", _target(args))
        _emit(args, out, answer, f"removed the rate limit of {answer['kind']} {answer['name']!r}")
        return
    answer = client.request("POST", "/limits", {**_target(args), "per_second": args.per_second})
    text = f"limited {answer['kind']} {answer['name']!r} to {answer['per_second']} per second"
    _emit(args, out, answer, text)


def _limits(
    table: Callable[[Sequence[Mapping[str, Any]], Sequence[str]], str],
) -> Callable[[Client, argparse.Namespace, TextIO], None]:
    def run(client: Client, args: argparse.Namespace, out: TextIO) -> None:
        answer = client.request("GET", "/limits")
        rows = answer["limits"]
        _emit(args, out, answer, table(rows, LIMIT_COLUMNS) if rows else "no rate limits")

    return run


def _emit(args: argparse.Namespace, out: TextIO, payload: Any, text: str) -> None:
    print(json.dumps(payload, indent=2) if args.json else text, file=out)


def actions(
    table: Callable[[Sequence[Mapping[str, Any]], Sequence[str]], str],
) -> dict[str, Callable[[Client, argparse.Namespace, TextIO], None]]:
    return {
        "pause": _pause,
        "resume": _resume,
        "pauses": _pauses(table),
        "limit": _limit,
        "limits": _limits(table),
    }
