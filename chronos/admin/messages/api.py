"""The messages from the admin API: one by id (show, cancel, requeue, reschedule), a filtered
page of them, the backlog's statistics, the busiest tenants and the nodes. Each endpoint answers
(status, JSON payload); ``chronos.admin.api`` routes to them. Bulk actions by filter are
``chronos.admin.messages.bulk``."""

from __future__ import annotations

import logging
from typing import Any

from chronos.admin.audit import AdminAudit
from chronos.admin.history.api import HistoryEndpoints
from chronos.admin.messages.filters import parse_list_params
from chronos.admin.messages.views import (
    TENANT_WALK_LIMIT,
    cluster_fire_rate,
    leader_of,
    message_json,
    node_json,
    record_json,
    stats_json,
    tenants_json,
)
from chronos.admin.params import (
    PAGE_MAX_BYTES,
    ApiError,
    encode_cursor,
    format_timestamp,
    parse_bool,
    parse_limit,
    parse_query,
    parse_reschedule_body,
)
from chronos.config.policy import park_after
from chronos.config.settings import Settings
from chronos.protocol import MAX_ID_LENGTH
from chronos.store import (
    COUNT_LIMIT,
    EXACT_COUNT_BELOW,
    CancelOutcome,
    MessageRecord,
    RequeueOutcome,
    RescheduleOutcome,
    Store,
)

log = logging.getLogger(__name__)

MESSAGES_PATH = "/admin/v1/messages"

CLAIMED_CANCEL = (
    "the message is claimed by a node and may be firing right now: that firing is not "
    "stopped, and nothing follows it (a series ends with it)"
)

FIRED_UNRECORDED = " (fired messages are not recorded: CHRONOS_HISTORY_FIRED=false)"
"""Added to the 404 of an unknown id on a node that keeps no fired messages: it may have fired."""

Reply = tuple[int, Any]
"""(HTTP status, JSON payload); None with 204."""


class MessageEndpoints:
    """``/admin/v1/messages``, ``/stats``, ``/tenants`` and ``/nodes``."""

    def __init__(self, settings: Settings, store: Store, audit: AdminAudit) -> None:
        self.settings = settings
        self.store = store
        self.audit = audit
        self.parked_at = park_after(settings)
        self.history = HistoryEndpoints(store)

    def get(self, message_id: str, query: str) -> Reply:
        params = parse_query(query, frozenset({"include_value"}))
        include_value = parse_bool("include_value", params.get("include_value"))
        record = self.store.get_message(message_id, include_value=True)  # for the preview
        if record is None:
            ended = self.history.get(message_id)  # no longer scheduled: how it ended
            if ended is not None:
                return ended
            unrecorded = self.settings.history_ttl and not self.settings.history_fired
            raise ApiError(
                404,
                f"message {message_id[:MAX_ID_LENGTH]!r} is not scheduled, nor in the history"
                + (FIRED_UNRECORDED if unrecorded else ""),
            )
        body = record_json(record, self.parked_at, include_value=include_value)
        body["history"] = self.history.history_of(message_id)  # earlier ends (a series' fires)
        return (200, body)

    def cancel(self, message_id: str, query: str, who: str) -> Reply:
        """A waiting or parked message is deleted (204). A claimed one is cancelled as far as it
        can be (202): the store left its cancel marker and ended a series with the occurrence
        in flight, which is not stopped; logged and audited as a cancel all the same."""
        parse_query(query, frozenset())
        outcome = self.store.cancel_message(message_id, self.settings.cancel_ttl_ms, by=who)
        if outcome is CancelOutcome.NOT_FOUND:
            raise ApiError(404, f"message {message_id!r} is not scheduled")
        claimed = outcome is CancelOutcome.CLAIMED
        log.info(
            "message %s cancelled through the admin API by %s%s",
            message_id,
            who,
            f" while claimed: {CLAIMED_CANCEL}" if claimed else "",
            extra={"event": "message_cancelled", "message_id": message_id, "claimed": claimed},
        )
        self.audit.message("cancelled", message_id, who, claimed=claimed)
        if claimed:
            return 202, {"id": message_id, "claimed": True, "detail": CLAIMED_CANCEL}
        return 204, None

    def requeue(self, message_id: str, query: str, who: str) -> Reply:
        parse_query(query, frozenset())
        outcome = self.store.requeue_message(message_id, self.parked_at)
        if outcome is RequeueOutcome.NOT_FOUND:
            raise ApiError(404, f"message {message_id!r} is not scheduled")
        if outcome is RequeueOutcome.NOT_PARKED:
            raise ApiError(
                409,
                f"message {message_id!r} is not parked (waiting or claimed): nothing to requeue",
            )
        log.info(
            "message %s requeued through the admin API by %s",
            message_id,
            who,
            extra={"event": "message_requeued", "message_id": message_id},
        )
        self.audit.message("requeued", message_id, who)
        return 204, None

    def reschedule(self, message_id: str, query: str, raw: bytes, who: str) -> Reply:
        parse_query(query, frozenset())
        when = parse_reschedule_body(raw)
        outcome, record = self.store.reschedule_message(
            message_id, self.parked_at, deadline=when.deadline, delay_ms=when.delay_ms
        )
        if outcome is RescheduleOutcome.NOT_FOUND:
            raise ApiError(404, f"message {message_id!r} is not scheduled")
        if outcome is RescheduleOutcome.CLAIMED:
            raise ApiError(
                409,
                f"message {message_id!r} is claimed by a node and may be firing right now; "
                "it cannot be rescheduled",
            )
        if outcome is RescheduleOutcome.PARKED:
            raise ApiError(
                409,
                f"message {message_id!r} is parked: requeue it first "
                f"(POST {MESSAGES_PATH}/{{id}}/requeue), then reschedule it",
            )
        assert record is not None
        log.info(
            "message %s rescheduled to %s through the admin API by %s",
            message_id,
            format_timestamp(record.deadline),
            who,
            extra={"event": "message_rescheduled", "message_id": message_id},
        )
        self.audit.message("rescheduled", message_id, who, deadline=record.deadline.timestamp())
        whole = self.store.get_message(message_id, include_value=True)  # as GET answers it
        body = record_json(whole or record, self.parked_at, include_value=False)
        body["history"] = self.history.history_of(message_id)
        return (200, body)

    def find(self, query: str) -> Reply:
        p = parse_list_params(query, self.settings.output_topic)
        if p.where.ended:
            return self.history.find(p)
        records = self.store.find_messages(
            p.where,
            park_attempts=self.parked_at,
            limit=p.limit + 1,
            after=p.after,
            max_bytes=PAGE_MAX_BYTES,
        )
        # A page ends at ``limit`` rows or once its keys and headers pass PAGE_MAX_BYTES (one
        # row at least): 1,000 rows of 1 MB headers must not build a gigabyte in the node.
        page: list[MessageRecord] = []
        for record in records[: p.limit]:
            if page and record.page_bytes > PAGE_MAX_BYTES:
                break
            page.append(record)
        next_cursor = (
            encode_cursor(page[-1].deadline, page[-1].id) if len(records) > len(page) else None
        )
        payload: dict[str, Any] = {
            "messages": [message_json(r, self.parked_at, include_value=False) for r in page],
            "next_cursor": next_cursor,
        }
        if p.count:
            counted = self.store.count_messages(
                p.where, park_attempts=self.parked_at, count_limit=COUNT_LIMIT
            )
            payload["count"] = counted.count
            payload["count_exact"] = counted.exact
        return (200, payload)

    def stats(self, query: str) -> Reply:
        parse_query(query, frozenset())
        backlog = self.store.backlog(
            self.parked_at, exact_below=EXACT_COUNT_BELOW, count_limit=COUNT_LIMIT
        )
        return (200, stats_json(backlog, self.parked_at))

    def tenants(self, query: str) -> Reply:
        params = parse_query(query, frozenset({"limit"}))
        limit = parse_limit(params.get("limit", str(self.settings.tenant_metrics_top)))
        backlogs = self.store.tenant_backlog(
            self.parked_at, limit=limit, count_limit=COUNT_LIMIT, max_tenants=TENANT_WALK_LIMIT
        )
        return (200, tenants_json(backlogs, limit))

    def nodes(self, query: str) -> Reply:
        params = parse_query(query, frozenset({"include_dead"}))
        include_dead = parse_bool("include_dead", params.get("include_dead"))
        window_s = self.settings.liveness_window_ms / 1000
        nodes = self.store.list_nodes(window_s, include_dead=include_dead)
        leader = leader_of(nodes)
        return (
            200,
            {
                "nodes": [node_json(n, leader, self.settings.node_id) for n in nodes],
                "leader": leader,
                "liveness_window_seconds": window_s,
                "fired_per_second": cluster_fire_rate(nodes),
            },
        )
