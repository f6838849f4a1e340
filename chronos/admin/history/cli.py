"""The history of ended messages from ``chronos admin`` (chronos.admin.history.api).

chronos admin get ID                   a message that ended: how (one line), then its records
chronos admin list --state fired       ended messages (fired, cancelled, expired, dead-lettered,
                                       replaced, or ended: any), with the list's filter flags
chronos admin history summary          by tenant: fired (lateness p50/p99), expired,
                                       dead-lettered, cancelled, replaced; --since DURATION or
                                       INSTANT (default 1h), --until INSTANT, --tenant T
chronos admin delete-tenant TENANT     delete everything of a tenant: its waiting messages and
                                       its history (--dry-run: count them first)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TextIO

from chronos.admin.messages.filter_flags import timestamp
from chronos.config.flags import described
from chronos.observability.logs import escape
from chronos.recurrence import DURATION_FORMS, parse_duration

ENDED_COLUMNS = (
    "id",
    "state",
    "deadline",
    "ended_at",
    "tenant",
    "key_text",
    "topic",
    "partition",
    "offset",
    "lateness_ms",
    "node",
    "ended_by",
    "reason",
)
RECORD_COLUMNS = ("state", "ended_at", "topic", "partition", "offset", "lateness_ms", "node")
SUMMARY_COLUMNS = (
    "tenant",
    "fired",
    "lateness_p50_ms",
    "lateness_p99_ms",
    "expired",
    "dead_lettered",
    "cancelled",
    "replaced",
)

Table = Callable[[Sequence[Mapping[str, Any]], Sequence[str]], str]


class Client(Protocol):
    def request(
        self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any: ...


def add_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    history = commands.add_parser(
        "history", help="the history of ended messages: summary by tenant and outcome"
    )
    which = history.add_subparsers(dest="history_command", required=True, metavar="WHAT")
    summary = which.add_parser(
        "summary",
        parents=[common],
        help="ended messages by tenant and outcome over a window, with the fired ones' lateness",
    )
    summary.add_argument(
        "--since",
        type=_since,
        default="3600s",
        metavar="DURATION|INSTANT",
        help=described("from this long ago (1h, 30m, 1d) or this instant (ISO-8601)", "1h"),
    )
    summary.add_argument(
        "--until", type=_instant, default=None, metavar="INSTANT", help="up to (ISO-8601)"
    )
    summary.add_argument("--tenant", default=None, help="only this tenant ('' : the default)")
    delete = commands.add_parser(
        "delete-tenant",
        parents=[common],
        help="delete everything of a tenant: its waiting messages and its history",
    )
    delete.add_argument("tenant", metavar="TENANT", help="the tenant ('' : the default tenant)")
    delete.add_argument("--dry-run", action="store_true", help="print the counts only")


def _instant(raw: str) -> str:
    """An ISO-8601 instant (no offset: UTC) as the API takes it."""
    return timestamp(raw).isoformat()


def _since(raw: str) -> str:
    """A duration back (any duration flag's form) or an instant, as the API takes it."""
    try:
        return f"{round(parse_duration(raw).total_seconds())}s"
    except ValueError:
        pass
    try:
        return _instant(raw)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is neither a duration ({DURATION_FORMS}) nor an ISO-8601 instant"
        ) from None


def ended_text(message: Mapping[str, Any], table: Table) -> str:
    """``admin get`` of a message that ended: how, its key (as text when printable, else base64;
    none: it had none, or its record is older than the history's keys), then every record kept
    of it."""
    lines = [escape(str(message.get("summary", "")))]
    if message.get("key_text") is not None:
        lines.append(f"key: {escape(str(message['key_text']))}")
    elif message.get("key") is not None:
        lines.append(f"key (base64): {message['key']}")
    records = message.get("history") or []
    if len(records) > 1:
        lines += ["", f"{len(records)} records (newest first):", table(records, RECORD_COLUMNS)]
    return "\n".join(lines)


def history_lines(message: Mapping[str, Any]) -> str:
    """``admin get`` of a waiting message: the ends it already had (a series' occurrences)."""
    records = message.get("history") or []
    return "\n".join(f"  {escape(str(r.get('summary')))}" for r in records)


def _summary(client: Client, args: argparse.Namespace, out: TextIO, table: Table) -> None:
    params = {"since": args.since, "until": args.until, "tenant": args.tenant}
    payload = client.request("GET", "/history/summary", params)
    rows = [{**t, "tenant": repr(t["tenant"])} for t in payload["tenants"]]
    text = f"ended since {payload['since']}" + (
        f" until {payload['until']}" if payload.get("until") else ""
    )
    text += "\n" + table(rows, SUMMARY_COLUMNS)
    if not payload.get("complete", True):
        text += "\n(more tenants: narrow with --tenant)"
    print(json.dumps(payload, indent=2) if args.json else text, file=out)


def _delete_tenant(client: Client, args: argparse.Namespace, out: TextIO) -> None:
    """POST /bulk/delete-tenant until it is complete (each request works a few seconds)."""
    params: dict[str, Any] = {"tenant": args.tenant}
    if args.dry_run:
        answer = client.request("POST", "/bulk/delete-tenant", {**params, "dry_run": "true"})
        text = (
            f"tenant {args.tenant!r}: {answer['messages']} messages and {answer['history']} "
            "history records would be deleted"
        )
        print(json.dumps(answer, indent=2) if args.json else escape(text), file=out)
        return
    total = {"cancelled": 0, "claimed": 0, "history_deleted": 0}
    while True:
        answer = client.request("POST", "/bulk/delete-tenant", params)
        for name in total:
            total[name] += int(answer[name])
        if answer["complete"]:
            break
    text = (
        f"tenant {args.tenant!r}: {total['cancelled']} messages cancelled"
        + (f" ({total['claimed']} claimed: left to fire)" if total["claimed"] else "")
        + f", {total['history_deleted']} history records deleted"
    )
    payload = {"tenant": args.tenant, **total, "complete": True}
    print(json.dumps(payload, indent=2) if args.json else escape(text), file=out)


def actions(table: Table) -> dict[str, Callable[[Any, argparse.Namespace, TextIO], None]]:
    def history(client: Any, args: argparse.Namespace, out: TextIO) -> None:
        _summary(client, args, out, table)

    return {"history": history, "delete-tenant": _delete_tenant}
