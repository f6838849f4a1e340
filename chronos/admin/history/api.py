"""The history of ended messages from the admin API: a message that is no longer scheduled
(``GET /admin/v1/messages/{id}``), a filtered page of ended messages (``GET /admin/v1/messages``
with ``state`` fired, cancelled, expired, dead-lettered, replaced or ended: the list's filters
and cursor) and ``GET /admin/v1/history/summary`` (counts by tenant and outcome over a window).
``chronos.admin.messages.api`` hands the first two over."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from itertools import groupby
from typing import Any

from chronos.admin.history.views import ended_json, ended_message_json, summary_json
from chronos.admin.messages.filters import ListParams
from chronos.admin.params import (
    PAGE_MAX_BYTES,
    ApiError,
    encode_cursor,
    parse_limit,
    parse_query,
    parse_timestamp,
)
from chronos.protocol import MAX_ID_LENGTH
from chronos.store import EndedRecord, Store
from chronos.store.history import page_weight

SUMMARY_PATH = "/admin/v1/history/summary"
SUMMARY_PARAMS = frozenset({"since", "until", "tenant", "limit"})
DEFAULT_SINCE = timedelta(hours=1)
DUPLICATES_SLACK = 20
"""Records past a page's end read with it: a page never ends between two records of one message
at one deadline (a message fired twice), which the (deadline, id) cursor could not tell apart."""

Reply = tuple[int, Any]


class HistoryEndpoints:
    def __init__(self, store: Store) -> None:
        self.store = store

    def get(self, message_id: str) -> Reply | None:
        """An ended message's records (None: it has none: never scheduled, or past the TTL)."""
        records = self.store.ended_messages(message_id)
        if not records:
            return None
        return 200, ended_message_json(records)

    def history_of(self, message_id: str) -> list[dict[str, Any]]:
        """A waiting message's earlier ends (a series' occurrences, an earlier fire)."""
        return [ended_json(r) for r in self.store.ended_messages(message_id)]

    def find(self, p: ListParams) -> Reply:
        # ``count`` is not answered for ended messages (the summary counts them by tenant).
        records = self.store.find_ended(
            p.where, limit=p.limit + DUPLICATES_SLACK, after=p.after, max_bytes=PAGE_MAX_BYTES
        )
        # A page ends at ``limit`` records or before the message whose keys take it past
        # PAGE_MAX_BYTES (one message at least), never between two records of one message.
        page: list[EndedRecord] = []
        weight = 0
        for _, group in groupby(records, key=_key):
            ended = list(group)
            added = sum(page_weight(r) for r in ended)
            if page and (len(page) >= p.limit or weight + added > PAGE_MAX_BYTES):
                break
            page.extend(ended)
            weight += added
        next_cursor = (
            encode_cursor(page[-1].deadline, page[-1].id) if len(records) > len(page) else None
        )
        return 200, {"messages": [ended_json(r) for r in page], "next_cursor": next_cursor}

    def summary(self, query: str) -> Reply:
        params = parse_query(query, SUMMARY_PARAMS)
        now = self.store.ping()
        since = _instant("since", params.get("since"), now) or now - DEFAULT_SINCE
        until = parse_timestamp("until", params["until"]) if "until" in params else None
        limit = parse_limit(params.get("limit", "1000"))
        tenant = params.get("tenant")
        if tenant is not None and (len(tenant) > MAX_ID_LENGTH or "\x00" in tenant):
            raise ApiError(400, f"tenant: at most {MAX_ID_LENGTH} characters, no NUL")
        summaries = self.store.summarize_history(since, until, tenant=tenant, limit=limit + 1)
        complete = len(summaries) <= limit
        return 200, summary_json(summaries[:limit], since, until, complete)


def _key(record: EndedRecord) -> tuple[datetime, str]:
    return record.deadline, record.id


AGO = re.compile(r"([0-9]{1,9})(ms|s|m|h|d)?")
"""``since`` as a duration back from now: a whole number and a unit (seconds without one)."""
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_LONGEST = timedelta(days=3660)  # further back than any history: everything it holds


def _instant(name: str, raw: str | None, now: datetime) -> datetime | None:
    """An RFC 3339 instant, or a duration back from now (``AGO``: ``1h``, ``30m``, ``90``)."""
    if raw is None:
        return None
    ago = AGO.fullmatch(raw)
    if ago is None:
        return parse_timestamp(name, raw)
    back = timedelta(seconds=int(ago[1]) * _UNIT[ago[2] or "s"])
    return now - min(back, _LONGEST)
