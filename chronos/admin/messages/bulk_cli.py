"""``chronos admin cancel`` and ``chronos admin reschedule`` by filter (no id): the admin API's
bulk actions (``POST /admin/v1/bulk/...``), followed to the end (each answer that is not
complete is resumed, with a progress line on stderr). ``--dry-run`` prints the count only."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Protocol, TextIO

from chronos.admin.messages.filter_flags import filter_params
from chronos.errors import ConfigError


class Client(Protocol):
    def request(self, method: str, path: str, params: Any = None, body: Any = None) -> Any: ...


def _matched(answer: dict[str, Any]) -> str:
    count = answer["matched"]
    if answer["matched_exact"]:
        return f"{count} messages match"
    return f"about {count} match (an estimate)"


def run_bulk(
    client: Client,
    action: str,
    args: argparse.Namespace,
    out: TextIO,
    body: dict[str, Any] | None = None,
    err: TextIO | None = None,
) -> None:
    """POST /bulk/{action} with the filter flags until it is complete."""
    err = err or sys.stderr
    params = {k: v for k, v in filter_params(args).items() if v is not None}
    if args.dry_run:
        params["dry_run"] = "true"
        answer = client.request("POST", f"/bulk/{action}", params, body)
        print(json.dumps(answer, indent=2) if args.json else _matched(answer), file=out)
        return
    total: dict[str, int] = {}
    while True:
        answer = client.request("POST", f"/bulk/{action}", params, body)
        for name in ("cancelled", "claimed", "rescheduled"):
            if name in answer:
                total[name] = total.get(name, 0) + int(answer[name])
        if answer["complete"]:
            break
        print(f"... {_progress(total)} so far, going on", file=err, flush=True)
        params["resume"] = answer["resume"]
    if args.json:
        print(json.dumps({"action": action, **total, "complete": True}, indent=2), file=out)
    else:
        print(_progress(total), file=out)


def _progress(total: dict[str, int]) -> str:
    if "rescheduled" in total:
        return f"rescheduled {total['rescheduled']}"
    text = f"cancelled {total.get('cancelled', 0)}"
    if total.get("claimed"):
        text += f" ({total['claimed']} claimed: left to fire, a series ends with them)"
    return text


def reschedule_body(args: argparse.Namespace) -> dict[str, Any]:
    """The move of a bulk reschedule: --at, --shift or --now (--in is for one message)."""
    if args.delay is not None:
        raise ConfigError(
            "--in moves one message (give its id); by filter use --at, --shift or --now"
        )
    if args.at is not None:
        return {"deadline": args.at.isoformat(timespec="milliseconds")}
    if args.shift is not None:
        return {"shift_ms": round(args.shift.total_seconds() * 1000)}
    return {"fire_now": True}
