"""``chronos admin``: the admin API (``/admin/v1``, see chronos.admin.api) from the command line.

chronos admin get ID            a message's whole record; once it ended, how (the history)
chronos admin list              messages by (deadline, id), filtered: --tenant, --topic,
                                --id-prefix, --key/--key-prefix, --state (also fired,
                                cancelled, expired, dead-lettered, replaced: the history's),
                                --from/--to,
                                --recurring/--no-recurring; --count, --limit, --cursor, --all
                                (follow next_cursor to the end)
chronos admin history summary   ended messages by tenant and outcome over --since (1h)
chronos admin stats             counts by state, overdue, oldest and newest deadline
chronos admin nodes             live nodes (and, with --include-dead, nodes holding claims)
chronos admin tenants           the busiest tenants: waiting, overdue, claimed, parked (--limit)
chronos admin shards            each shard's database, up or not, its counts; the moves
chronos admin cancel ID         cancel a waiting or parked message
chronos admin cancel FILTERS    cancel every message the list's filter flags match (--dry-run:
                                print how many match, change nothing)
chronos admin requeue ID        requeue a parked message
chronos admin reschedule ID     move a waiting message: --at TIMESTAMP or --in DURATION
chronos admin pause / resume    --tenant T | --topic X: pause or resume it cluster-wide;
                                ``pauses`` lists what is paused (chronos.admin.flow.cli)
chronos admin dead-letters      the dead-letter topic (chronos.admin.deadletters.cli)
chronos admin replay            replay dead letters to the input topic, once each
chronos admin reschedule FILTERS  move every waiting message the filters match: --at, --shift
                                DURATION (negative: earlier) or --now (fire now); --dry-run

A duration is written as every duration flag's (chronos.config.flags.duration): seconds, 500ms,
30s, 5m, 2h, 1d or PT5M. ``cancel`` and ``reschedule`` here act through a node's admin API (HTTP);
``chronos cancel`` and ``chronos reschedule`` write a record to the input topic instead.

The node's URL and the bearer token come from ``--url``/``--token`` or ``CHRONOS_ADMIN_URL``/
``CHRONOS_ADMIN_TOKEN``. Output is a table for people, or the API's JSON with ``--json``.
Exit status: 0 done, 1 the API refused or could not be reached (its error is printed),
2 a bad flag or setting (named).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO
from urllib.parse import quote, urlencode, urlsplit

from chronos.admin.flow import cli as cli_flow
from chronos.admin.history import cli as cli_history
from chronos.admin.history.cli import ENDED_COLUMNS
from chronos.admin.messages.bulk_cli import reschedule_body, run_bulk
from chronos.admin.messages.filter_flags import (
    ENDED_STATES,
    add_filter_flags,
    filter_params,
    narrowed,
    timestamp,
)
from chronos.admin.output import pairs, table
from chronos.config.flags import described, duration, seconds, signed_duration
from chronos.config.settings import ADMIN_URL_ENV, OPTIONS_BY_NAME
from chronos.errors import ChronosError, ConfigError
from chronos.observability.logs import escape

URL_ENV = ADMIN_URL_ENV
TOKEN_ENV = OPTIONS_BY_NAME["admin_token"].env  # the node's own token setting
DEFAULT_URL = "http://127.0.0.1:8080"
PREFIX = "/admin/v1"
TENANT_COLUMNS = ("tenant", "overdue", "oldest_overdue_age_seconds", "waiting", "claimed", "parked")


class ApiFailure(ChronosError):
    """The API answered with an error status (or could not be reached)."""


@dataclass(frozen=True)
class AdminClient:
    """A minimal client of the admin API (standard library only)."""

    url: str
    token: str
    timeout: float = 10.0

    def request(
        self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        target = self.url.rstrip("/") + PREFIX + path + ("?" + urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(target, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiFailure(f"{method} {path}: {exc.code} {_error_text(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiFailure(f"cannot reach the admin API at {self.url}: {reason}") from None
        return json.loads(raw) if raw else None

    @staticmethod
    def message_path(message_id: str) -> str:
        return "/messages/" + quote(message_id, safe="")

    def get(self, message_id: str, include_value: bool = False) -> Any:
        params = {"include_value": "true"} if include_value else None
        return self.request("GET", self.message_path(message_id), params)

    def list(self, **params: Any) -> Any:
        return self.request("GET", "/messages", params)

    def stats(self) -> Any:
        return self.request("GET", "/stats")

    def tenants(self, limit: int | None = None) -> Any:
        return self.request("GET", "/tenants", {"limit": limit} if limit else None)

    def shards(self) -> Any:
        return self.request("GET", "/shards")

    def nodes(self, include_dead: bool = False) -> Any:
        return self.request("GET", "/nodes", {"include_dead": "true"} if include_dead else None)

    def cancel(self, message_id: str) -> Any:
        """None: cancelled (204); a claimed message's {"id", "claimed", "detail"} (202)."""
        return self.request("DELETE", self.message_path(message_id))

    def requeue(self, message_id: str) -> None:
        self.request("POST", self.message_path(message_id) + "/requeue")

    def reschedule(
        self, message_id: str, *, deadline: datetime | None = None, delay_ms: int | None = None
    ) -> Any:
        """POST /messages/{id}/reschedule with {"deadline": ISO} or {"delay_ms": int}."""
        if (deadline is None) == (delay_ms is None):
            raise ValueError("give exactly one of deadline and delay_ms")
        body: dict[str, Any] = (
            {"deadline": deadline.isoformat(timespec="milliseconds")}
            if deadline is not None
            else {"delay_ms": delay_ms}
        )
        return self.request("POST", self.message_path(message_id) + "/reschedule", body=body)


def _error_text(raw: bytes) -> str:
    try:
        return str(json.loads(raw)["error"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")[:200] or "(no detail)"


# ---------------------------------------------------------------------------------- parsing


def _limit(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise argparse.ArgumentTypeError(f"{raw!r} must be a whole number from 1 to 1000")
    return int(raw)


def add_parser(sub: Any) -> None:
    """Add ``admin`` and its subcommands to the ``chronos`` subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=None, help=described("the node's HTTP address", DEFAULT_URL, URL_ENV)
    )
    common.add_argument(
        "--token",
        default=None,
        help=described("the admin API bearer token, required", env=TOKEN_ENV),
    )
    common.add_argument("--json", action="store_true", help="print the API's JSON (for scripts)")
    common.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="DURATION",
        help=described("how long to wait for an answer", "10s"),
    )

    admin = sub.add_parser(
        "admin",
        help="inspect and act on scheduled messages through a node's admin API (HTTP)",
        description="Act through a node's admin API (HTTP: --url, --token); dead-letters and "
        "replay read and write the dead-letter topic in Kafka instead.",
    )
    commands = admin.add_subparsers(dest="admin_command", required=True, metavar="ACTION")

    get = commands.add_parser("get", parents=[common], help="show one message")
    get.add_argument("id", metavar="ID", help="chronosMessageId")
    get.add_argument("--include-value", action="store_true", help="include the value (base64)")

    listing = commands.add_parser("list", parents=[common], help="find messages by filter")
    add_filter_flags(listing, ended=True)
    listing.add_argument("--count", action="store_true", help="also count the matching messages")
    listing.add_argument(
        "--limit", type=_limit, default=100, help=described("page size, 1-1000", 100)
    )
    listing.add_argument("--cursor", default=None, help="next_cursor of the previous page")
    listing.add_argument("--all", action="store_true", help="follow the cursor to the last page")

    commands.add_parser("stats", parents=[common], help="counts by state, overdue, deadlines")

    tenants = commands.add_parser(
        "tenants", parents=[common], help="the busiest tenants: overdue, waiting, claimed, parked"
    )
    tenants.add_argument(
        "--limit",
        type=_limit,
        default=None,
        help=described("how many, 1-1000", "the node's CHRONOS_TENANT_METRICS_TOP"),
    )

    commands.add_parser("shards", parents=[common], help="each shard: up, counts; the moves")
    nodes = commands.add_parser("nodes", parents=[common], help="live nodes and the leader")
    nodes.add_argument("--include-dead", action="store_true", help="also nodes holding claims")

    cancel = commands.add_parser(
        "cancel",
        parents=[common],
        help="cancel a message, or every message the filters match, through the admin API",
        description="Cancel through a node's admin API (HTTP), straight in the database "
        "(chronos cancel writes a cancel record to the input topic instead, for intake).",
    )
    cancel.add_argument("id", nargs="?", metavar="ID", help="chronosMessageId (or: filter flags)")
    add_filter_flags(cancel)
    cancel.add_argument("--dry-run", action="store_true", help="print the count only")
    requeue = commands.add_parser("requeue", parents=[common], help="requeue a parked message")
    requeue.add_argument("id", metavar="ID", help="chronosMessageId")

    reschedule = commands.add_parser(
        "reschedule",
        parents=[common],
        help="move a waiting message (or every one the filters match) to a new deadline, "
        "through the admin API",
        description="Move deadlines through a node's admin API (HTTP); only the deadline "
        "changes (chronos reschedule writes a whole new message to the input topic instead).",
    )
    reschedule.add_argument(
        "id", nargs="?", metavar="ID", help="chronosMessageId (or: filter flags)"
    )
    add_filter_flags(reschedule, state=False)
    reschedule.add_argument("--dry-run", action="store_true", help="print the count only")
    when = reschedule.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--at",
        type=timestamp,
        default=None,
        metavar="INSTANT",
        help="new deadline, ISO-8601 (no offset: UTC)",
    )
    when.add_argument(
        "--in",
        dest="delay",
        type=duration,
        default=None,
        metavar="DURATION",
        help="new deadline from now: seconds, 500ms, 30s, 5m, 2h, 1d or PT5M",
    )
    when.add_argument(
        "--shift",
        type=signed_duration,
        default=None,
        metavar="DURATION",
        help="by filter: move each by DURATION (negative: earlier; --shift=-1h)",
    )
    when.add_argument("--now", action="store_true", help="by filter: fire each now")

    cli_flow.add_parsers(commands, common)
    cli_history.add_parsers(commands, common)

    from chronos.admin.deadletters import (
        cli as deadletters_cli,  # the dead-letter topic: straight to Kafka
    )

    deadletters_cli.add_parsers(commands)


def client_from(args: argparse.Namespace, environ: Mapping[str, str]) -> AdminClient:
    url = args.url or environ.get(URL_ENV) or DEFAULT_URL
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"{URL_ENV} (--url) {url!r} is invalid: expected http(s)://HOST:PORT of a node"
        )
    token = args.token or environ.get(TOKEN_ENV, "")
    if not token:
        raise ConfigError(f"{TOKEN_ENV} (--token) is not set: the admin API needs its token")
    return AdminClient(url, token, args.timeout)


# ---------------------------------------------------------------------------------- output


MESSAGE_COLUMNS = (
    "id",
    "state",
    "deadline",
    "tenant",
    "key_text",
    "attempts",
    "claimed_by",
    "value_size",
    "last_error",
    "rule",
)
NODE_COLUMNS = ("node_id", "live", "leader", "hostname", "version", "heartbeat_age_seconds")


def run(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """Run one ``chronos admin`` action; returns the exit status."""
    out, err = sys.stdout, sys.stderr
    try:
        client = client_from(args, os.environ if environ is None else environ)
        action: Callable[[AdminClient, argparse.Namespace, TextIO], None] = ACTIONS[
            args.admin_command
        ]
        action(client, args, out)
    except ConfigError as exc:
        print(f"chronos admin: configuration error: {exc}", file=err)
        return 2
    except ChronosError as exc:
        print(f"chronos admin: {escape(str(exc))}", file=err)
        return 1
    return 0


def _emit(args: argparse.Namespace, out: TextIO, payload: Any, text: str) -> None:
    print(json.dumps(payload, indent=2) if args.json else text, file=out)


def _get(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    message = client.get(args.id, include_value=args.include_value)
    if message.get("ended"):  # no longer scheduled: how it ended, from the history
        _emit(args, out, message, cli_history.ended_text(message, table))
        return
    earlier = cli_history.history_lines(message)
    message_shown = {k: v for k, v in message.items() if k != "history"}
    shown = {k: v for k, v in message_shown.items() if k != "headers"}
    shown["headers"] = ", ".join(h["name"] for h in message.get("headers", [])) or None
    shown["recurrence"] = _rule(message)
    _emit(args, out, message, pairs(shown) + (f"\nended before:\n{earlier}" if earlier else ""))


def _rule(message: Mapping[str, Any]) -> str | None:
    """A recurring message's rule as a table cell (None: it fires once)."""
    recurrence = message.get("recurrence")
    return recurrence.get("rule") if isinstance(recurrence, dict) else None


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    params: dict[str, Any] = {
        **filter_params(args),
        "limit": args.limit,
        "cursor": args.cursor,
        "count": "true" if args.count else None,
    }
    if args.all:
        _list_all(client, params, args.json, out)
        return
    page = client.list(**params)
    cursor = page.get("next_cursor")
    text = table([{**m, "rule": _rule(m)} for m in page["messages"]], _columns(args))
    if cursor:
        text += f"\nmore: --cursor {cursor}"
    if "count" in page:
        text += f"\nmatching: {'' if page['count_exact'] else 'about '}{page['count']}"
    _emit(args, out, page, text)


def _list_all(client: AdminClient, params: dict[str, Any], as_json: bool, out: TextIO) -> None:
    """Every page, written as it arrives: never more than one page (bounded by rows and bytes
    on the node) in memory, however many messages there are. ``--json`` writes the same
    document a single page would, ``{"messages": [...], "next_cursor": null}``."""
    written = 0
    columns = ENDED_COLUMNS if params.get("state") in ENDED_STATES else MESSAGE_COLUMNS
    if as_json:
        out.write('{"messages": [')
    while True:
        page = client.list(**params)
        for message in page["messages"]:
            if as_json:
                out.write(("," if written else "") + "\n  " + json.dumps(message))
            written += 1
        if not as_json and (page["messages"] or written == 0):
            lines = table([{**m, "rule": _rule(m)} for m in page["messages"]], columns).split("\n")
            out.write("\n".join(lines if written == len(page["messages"]) else lines[1:]) + "\n")
        out.flush()
        params["cursor"] = page.get("next_cursor")
        if not params["cursor"]:
            break
    if as_json:
        out.write('\n], "next_cursor": null}\n')


def _columns(args: argparse.Namespace) -> tuple[str, ...]:
    """The list's columns: an ended message's (from the history) or a waiting one's."""
    return ENDED_COLUMNS if getattr(args, "state", None) in ENDED_STATES else MESSAGE_COLUMNS


def _stats(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    stats = client.stats()
    _emit(args, out, stats, pairs(stats))


def _tenants(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    payload = client.tenants(limit=args.limit)
    rows = [{**t, "tenant": repr(t["tenant"])} for t in payload["tenants"]]
    text = table(rows, TENANT_COLUMNS)
    if not payload["tenants_complete"]:
        text += f"\n(only the first {payload['max_tenants']} tenants by name were looked at)"
    _emit(args, out, payload, text)


def _shards(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    payload = client.shards()
    text = table(payload["shards"], ("shard", "up", "waiting", "claimed", "overdue", "parked"))
    moves = [
        f"partition {m['partition']}: {m['state']} to shard {m['shard']}" for m in payload["moves"]
    ]
    _emit(args, out, payload, "\n".join([text, f"map: {payload['map']}", *moves]))


def _nodes(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    payload = client.nodes(include_dead=args.include_dead)
    text = table(payload["nodes"], (*NODE_COLUMNS, "claimed"))
    rate = f"fired/s (cluster): {payload.get('fired_per_second') or 0.0:.1f}"
    _emit(args, out, payload, f"{text}\nleader: {payload.get('leader') or '-'}\n{rate}")


def _one_or_filter(args: argparse.Namespace) -> bool:
    """True: act on the message ``args.id``; False: on every one the filter flags match."""
    if args.id is not None and (narrowed(args) or getattr(args, "state", None) or args.dry_run):
        raise ConfigError("give a message id or filter flags (and --dry-run), not both")
    if args.id is None and not narrowed(args):
        raise ConfigError(
            "give a message id, or filter flags (--tenant, --topic, --id-prefix, --key, "
            "--key-prefix, --recurring, --from, --to) to act on every message they match"
        )
    return args.id is not None


def _cancel(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    if not _one_or_filter(args):
        run_bulk(client, "cancel", args, out)
        return
    answer = client.cancel(args.id)
    claimed = isinstance(answer, dict) and bool(answer.get("claimed"))
    text = f"cancelled {args.id}" + (f" (claimed: {answer.get('detail')})" if claimed else "")
    _emit(args, out, {"id": args.id, "cancelled": True, "claimed": claimed}, text)


def _requeue(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    client.requeue(args.id)
    _emit(args, out, {"id": args.id, "requeued": True}, f"requeued {args.id}")


def _reschedule(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    if not _one_or_filter(args):
        run_bulk(client, "reschedule", args, out, reschedule_body(args))
        return
    if args.shift is not None or args.now:
        raise ConfigError("--shift and --now move messages by filter: give filter flags, no id")
    if args.at is not None:
        answer = client.reschedule(args.id, deadline=args.at)
    else:
        answer = client.reschedule(args.id, delay_ms=round(args.delay.total_seconds() * 1000))
    deadline = (answer or {}).get("deadline") if isinstance(answer, dict) else None
    payload = answer if answer is not None else {"id": args.id, "rescheduled": True}
    _emit(args, out, payload, f"rescheduled {args.id}" + (f" to {deadline}" if deadline else ""))


ACTIONS: dict[str, Callable[[AdminClient, argparse.Namespace, TextIO], None]] = {
    "get": _get,
    "list": _list,
    "stats": _stats,
    "tenants": _tenants,
    "nodes": _nodes,
    "shards": _shards,
    "cancel": _cancel,
    "requeue": _requeue,
    "reschedule": _reschedule,
    **cli_flow.actions(table),
    **cli_history.actions(table),
}
