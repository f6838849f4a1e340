"""The admin API's bulk actions: cancel, reschedule or fire now every message a filter matches
(``POST /admin/v1/bulk/cancel`` and ``/bulk/reschedule``, the list's filters as query
parameters).

Each batch is one bounded statement of the store (``bulk_cancel``/``bulk_reschedule``: up to
``BULK_BATCH`` rows, no round trip per message). Claimed rows are treated as the single-message
actions and a Kafka cancel treat them: a cancel leaves them to fire (a series ends with the
occurrence in flight) and marks them; a reschedule leaves them (and parked ones) alone. A request
works for at most ``BULK_BUDGET_S`` seconds; when the matching rows are not all done it answers
``complete: false`` with a ``resume`` token to pass back (the same filter). ``dry_run=true``
answers how many rows match, changing nothing. Repeating an action is safe: a cancel finds
nothing left, a reschedule to a deadline or fire now moves nothing twice; a shift shifts again
(it is relative), so resume an interrupted shift instead of repeating it. Every action is logged
with the token's name and the client's address.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from base64 import b64encode
from typing import Any

from chronos.admin.audit import AdminAudit
from chronos.admin.messages.filters import Resume, encode_resume, parse_bulk_params
from chronos.admin.params import MAX_DELAY_MS, ApiError, format_timestamp, parse_timestamp
from chronos.config.settings import Settings
from chronos.store import BulkBatch, MessageFilter, Store

log = logging.getLogger(__name__)

BULK_BUDGET_S = 5.0  # a request's batches stop starting after this long (resume to go on)
DRY_RUN_COUNT_LIMIT = 1_000_000  # a dry run counts exactly up to this many rows


def filter_json(where: MessageFilter) -> dict[str, Any]:
    """The filter's given fields as JSON values (bytes as base64, instants as RFC 3339): the
    target of a bulk action's audit record."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(where):
        value = getattr(where, f.name)
        if value is None or value is False:
            continue
        if isinstance(value, bytes):
            out[f.name] = b64encode(value).decode("ascii")
        elif hasattr(value, "isoformat"):
            out[f.name] = format_timestamp(value)
        else:
            out[f.name] = value
    return out


def describe(where: MessageFilter) -> str:
    """The filter's given fields, for the log (bytes as their repr)."""
    fields = {f.name: getattr(where, f.name) for f in dataclasses.fields(where)}
    shown = {k: v for k, v in fields.items() if v is not None and v is not False}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items()) or "(none)"


@dataclasses.dataclass(frozen=True, slots=True)
class Move:
    """Where a bulk reschedule moves rows: exactly one field set."""

    deadline: Any = None
    shift_ms: int | None = None
    fire_now: bool = False


def parse_move(raw: bytes) -> Move:
    usage = (
        'expected a JSON object with exactly one of "deadline" (RFC 3339), "shift_ms" (an '
        'integer, negative for earlier) and "fire_now": true'
    )
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, f"the body is not JSON: {usage}") from None
    if not isinstance(body, dict) or len(body) != 1:
        raise ApiError(400, usage)
    ((name, value),) = body.items()
    if name == "deadline" and isinstance(value, str):
        return Move(deadline=parse_timestamp("deadline", value))
    if name == "shift_ms":
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_DELAY_MS:
            raise ApiError(
                400, f"shift_ms: expected an integer from -{MAX_DELAY_MS} to {MAX_DELAY_MS}"
            )
        return Move(shift_ms=value)
    if name == "fire_now" and value is True:
        return Move(fire_now=True)
    raise ApiError(400, usage)


class BulkActions:
    """Runs ``POST /admin/v1/bulk/{action}`` for ``chronos.admin.api``."""

    ACTIONS = ("cancel", "reschedule")

    def __init__(
        self, settings: Settings, store: Store, parked_at: int, audit: AdminAudit | None = None
    ) -> None:
        self.settings = settings
        self.store = store
        self.parked_at = parked_at
        self.audit = audit  # CHRONOS_AUDIT_TOPIC: one "bulk" record per request that acted

    def run(self, action: str, query: str, raw: bytes, who: str) -> tuple[int, dict[str, Any]]:
        p = parse_bulk_params(query, self.settings.output_topic)
        if action == "cancel":
            if raw:
                raise ApiError(400, "a bulk cancel takes no body: its filter is the query")
            if p.dry_run:
                return 200, self._dry_run("cancel", p.where)
            return 200, self._cancel(p.where, p.resume, who)
        move = parse_move(raw)
        if p.where.state not in (None, "waiting"):
            raise ApiError(400, "state: a reschedule moves waiting messages only")
        where = dataclasses.replace(p.where, state="waiting")
        if p.dry_run:
            return 200, self._dry_run("reschedule", where)
        return 200, self._reschedule(where, move, p.resume, who)

    def _dry_run(self, action: str, where: MessageFilter) -> dict[str, Any]:
        counted = self.store.count_messages(
            where, park_attempts=self.parked_at, count_limit=DRY_RUN_COUNT_LIMIT
        )
        return {
            "action": action,
            "dry_run": True,
            "matched": counted.count,
            "matched_exact": counted.exact,
        }

    def _cancel(self, where: MessageFilter, resume: Resume | None, who: str) -> dict[str, Any]:
        started = time.monotonic()
        after = resume.after if resume else None
        cancelled = claimed = 0
        while True:
            batch = self.store.bulk_cancel(
                where,
                park_attempts=self.parked_at,
                after=after,
                cancel_ttl_ms=self.settings.cancel_ttl_ms,
                by=who,
            )
            cancelled, claimed, after = cancelled + batch.done, claimed + batch.claimed, batch.after
            if after is None or time.monotonic() - started > BULK_BUDGET_S:
                break
        log.info(
            "bulk cancel through the admin API by %s: %d cancelled, %d claimed left to fire "
            "(filter: %s)%s",
            who,
            cancelled,
            claimed,
            describe(where),
            "" if after is None else " (stopped at its time budget: to be resumed)",
            extra={"event": "admin_bulk_cancel", "by": who, "cancelled": cancelled},
        )
        if self.audit is not None:
            self.audit.operator(
                "bulk",
                who,
                filter_json(where),
                count=cancelled,
                details={"action": "cancel", "claimed": claimed, "complete": after is None},
            )
        return {
            "action": "cancel",
            "dry_run": False,
            "cancelled": cancelled,
            "claimed": claimed,
            "complete": after is None,
            "resume": None if after is None else encode_resume(Resume(after, None)),
        }

    def _reschedule(
        self, where: MessageFilter, move: Move, resume: Resume | None, who: str
    ) -> dict[str, Any]:
        started = time.monotonic()
        after = resume.after if resume else None
        since = resume.since if resume else None
        moved = 0
        while True:
            batch: BulkBatch = self.store.bulk_reschedule(
                where,
                park_attempts=self.parked_at,
                after=after,
                since=since,
                deadline=move.deadline,
                shift_ms=move.shift_ms,
                fire_now=move.fire_now,
            )
            since = since or batch.now  # later batches never meet a row moved by this action
            moved, after = moved + batch.done, batch.after
            if after is None or time.monotonic() - started > BULK_BUDGET_S:
                break
        how = (
            "to now"
            if move.fire_now
            else f"to {format_timestamp(move.deadline)}"
            if move.deadline is not None
            else f"by {move.shift_ms} ms"
        )
        log.info(
            "bulk reschedule %s through the admin API by %s: %d moved (filter: %s)%s",
            how,
            who,
            moved,
            describe(where),
            "" if after is None else " (stopped at its time budget: to be resumed)",
            extra={"event": "admin_bulk_reschedule", "by": who, "rescheduled": moved},
        )
        if self.audit is not None:
            self.audit.operator(
                "bulk",
                who,
                filter_json(where),
                count=moved,
                details={"action": "reschedule", "move": how, "complete": after is None},
            )
        return {
            "action": "reschedule",
            "dry_run": False,
            "rescheduled": moved,
            "complete": after is None,
            "resume": None if after is None else encode_resume(Resume(after, since)),
        }
