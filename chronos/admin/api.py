"""The admin HTTP API (``/admin/v1``): find, inspect, count, cancel, requeue and reschedule
messages, one or many by filter; list nodes.

Mounted by ``chronos.node.http``; described by ``chronos/admin/openapi.json``, served at
``GET /admin/v1/openapi.json`` without authentication (it holds no data). Every other endpoint
requires ``Authorization: Bearer <token>``: ``CHRONOS_ADMIN_TOKEN`` reads and writes,
``CHRONOS_ADMIN_READ_TOKEN`` only reads (a write answers 403); without a configured token the
whole ``/admin/`` tree answers 404 with a message saying how to enable it: the API is never open
by default. Every write is logged with the token's name and the client's address. Errors are
JSON ``{"error": "..."}``.

GET    /admin/v1/messages/{id}   a message's whole record (``?include_value=true`` adds its value)
DELETE /admin/v1/messages/{id}   cancel a waiting (or parked) message; 409 while claimed
POST   /admin/v1/messages/{id}/requeue   requeue a parked message; 409 unless parked
POST   /admin/v1/messages/{id}/reschedule   move a waiting message to a new deadline:
       {"deadline": RFC 3339} or {"delay_ms": int} (from now, on the database clock);
       answers the message as GET does; 409 while claimed or parked
GET    /admin/v1/messages        find messages by filter (chronos.admin.filters), by (deadline,
       id), cursor-paged and bounded by bytes; ``count=true`` adds how many match
POST   /admin/v1/bulk/cancel     cancel every message a filter matches (chronos.admin.bulk)
POST   /admin/v1/bulk/reschedule move them: {"deadline"}, {"shift_ms"} or {"fire_now": true}
GET    /admin/v1/stats           counts by state, overdue, oldest/newest deadline
GET    /admin/v1/tenants         the busiest tenants: waiting, overdue, claimed, parked each
GET    /admin/v1/nodes           live nodes (heartbeats) and nodes holding claims, and the
       cluster's fire rate (the sum of the live nodes' own)
GET    /admin/v1/dead-letters    browse the dead-letter topic (``?reason=CODE``), cursor-paged
POST   /admin/v1/dead-letters/replay   replay chosen records or a reason's to the input topic,
       once each (chronos.admin.deadletters_api)
GET    /admin/v1/whoami          the caller's token and whether it may write (the console hides
       the actions a read-only token cannot take)
GET    /admin/v1/pauses          paused tenants and topics (chronos.admin.flow); POST pauses
       ``?tenant=T`` or ``?topic=X``, DELETE resumes it
GET    /admin/v1/limits          rate limits; POST sets one (``?tenant=T`` or ``?topic=X``,
       ``&per_second=N``), DELETE removes it

Message states: ``waiting`` (unclaimed), ``claimed`` (a node readied it and is firing it) and
``parked`` (unclaimed, its publish failed ``2 * max_publish_attempts`` times: never claimed
again until requeued or cancelled). Keys, values and header values are bytes, shown in base64
(and as text when printable).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any

from chronos.admin.access import Caller, Tokens
from chronos.admin.audit import AdminAudit
from chronos.admin.bulk import BulkActions
from chronos.admin.deadletters_api import DeadLetterEndpoints
from chronos.admin.filters import parse_list_params
from chronos.admin.flow import LimitEndpoints, PauseEndpoints
from chronos.admin.params import (
    ApiError,
    encode_cursor,
    format_timestamp,
    parse_bool,
    parse_limit,
    parse_message_id,
    parse_query,
    parse_reschedule_body,
    read_body,
)
from chronos.admin.views import (
    TENANT_WALK_LIMIT,
    cluster_fire_rate,
    leader_of,
    message_json,
    node_json,
    record_json,
    stats_json,
    tenants_json,
)
from chronos.config.policy import park_after
from chronos.config.settings import Settings
from chronos.errors import StoreError
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

PAGE_MAX_BYTES = 4 * 1024 * 1024  # keys and headers of one listed page (at least one row)

PREFIX = "/admin/v1"
SPEC_PATH = PREFIX + "/openapi.json"
MESSAGES_PATH = PREFIX + "/messages"
BULK_PATH = PREFIX + "/bulk/"  # POST BULK_PATH + cancel | reschedule
DEAD_LETTERS_PATH = PREFIX + "/dead-letters"  # GET; POST DEAD_LETTERS_PATH/replay
REQUEUE = "requeue"  # POST MESSAGES_PATH/{id}/requeue
RESCHEDULE = "reschedule"  # POST MESSAGES_PATH/{id}/reschedule
WRITES = ("DELETE", "POST")

Response = tuple[int, str, bytes, dict[str, str]]

DISABLED_MESSAGE = (
    "the admin API is disabled on this node: set CHRONOS_ADMIN_TOKEN (--admin-token) to enable it"
)
__all__ = ["TENANT_WALK_LIMIT", "AdminAPI", "Response", "admin_routes", "leader_of"]


@cache
def openapi_document() -> bytes:
    return resources.files("chronos.admin").joinpath("openapi.json").read_bytes()


def _json(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    return status, "application/json", json.dumps(payload).encode("utf-8"), dict(headers or {})


# -- the API ---------------------------------------------------------------------------------


class AdminAPI:
    """Routes ``/admin/...`` requests; everything else is left to the other routes (None)."""

    def __init__(self, settings: Settings, store: Store):
        self.settings = settings
        self.store = store
        self.tokens = Tokens.of(settings)
        self.parked_at = park_after(settings)
        self.audit = AdminAudit(settings)  # CHRONOS_AUDIT_TOPIC: writes recorded by whom
        self.bulk = BulkActions(settings, store, self.parked_at, self.audit)
        self.pauses = PauseEndpoints(store, self.audit)
        self.limits = LimitEndpoints(store, self.audit)
        self.dead_letters = DeadLetterEndpoints(settings, self.audit)

    @property
    def enabled(self) -> bool:
        return self.tokens.enabled

    def handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        client: str = "-",
        body: Callable[[], bytes] | bytes = b"",
    ) -> Response | None:
        """Answer one request; ``body`` is the request body or a function reading it (called
        only by the endpoints that take one, after authentication)."""
        if path != "/admin" and not path.startswith("/admin/"):
            return None
        try:
            return self._handle(method, path, query, headers, client, body)
        except ApiError as exc:
            return _json(exc.status, {"error": exc.message}, exc.headers)
        except StoreError as exc:
            log.warning("admin API: database error: %s", exc, extra={"event": "database_error"})
            return _json(503, {"error": "the database is unavailable; try again"})

    def _handle(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        client: str,
        body: Callable[[], bytes] | bytes,
    ) -> Response:
        if not self.enabled:
            raise ApiError(404, DISABLED_MESSAGE)
        if path == SPEC_PATH:
            self._allow(method, ("GET",))
            parse_query(query, frozenset())
            return 200, "application/json", openapi_document(), {}
        try:
            caller = self.tokens.authenticate(headers.get("Authorization"))
        except ApiError:
            log.info(
                "admin API: %s %s refused (bad or missing token) from %s",
                method,
                path,
                client,
                extra={"event": "admin_auth_failed"},
            )
            raise
        route, arg = self._route(path)
        if method in WRITES:
            self._check_write(caller, method, path, client)
        who = f"the {caller.token_name} token from {client}"
        if route == "message":
            self._allow(method, ("GET", "DELETE"))
            if method == "GET":
                return self.get_message(arg, query)
            return self.cancel_message(arg, query, who)
        if route == "requeue":
            self._allow(method, ("POST",))
            return self.requeue_message(arg, query, who)
        if route == "reschedule":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            return self.reschedule_message(arg, query, raw, who)
        if route == "bulk":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            status, payload = self.bulk.run(arg, query, raw, who)
            return _json(status, payload)
        if route == "dead-letters":
            self._allow(method, ("GET",))
            return _json(*self.dead_letters.browse(query))
        if route == "replay":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            return _json(*self.dead_letters.replay(query, raw, who))
        if route == "pauses":
            self._allow(method, ("GET", "POST", "DELETE"))
            if method == "GET":
                status, payload = self.pauses.list(query)
            elif method == "POST":
                status, payload = self.pauses.pause(query, caller.token_name, client)
            else:
                status, payload = self.pauses.resume(query, caller.token_name, client)
            return _json(status, payload)
        if route == "limits":
            self._allow(method, ("GET", "POST", "DELETE"))
            if method == "GET":
                status, payload = self.limits.list(query)
            elif method == "POST":
                status, payload = self.limits.set(query, caller.token_name, client)
            else:
                status, payload = self.limits.clear(query, caller.token_name, client)
            return _json(status, payload)
        self._allow(method, ("GET",))
        if route == "messages":
            return self.list_messages(query)
        if route == "stats":
            return self.stats(query)
        if route == "tenants":
            return self.tenants(query)
        if route == "whoami":
            parse_query(query, frozenset())
            return _json(200, {"token": caller.token_name, "can_write": caller.can_write})
        return self.nodes(query)

    @staticmethod
    def _check_write(caller: Caller, method: str, path: str, client: str) -> None:
        try:
            caller.require_write(method, path)
        except ApiError:
            log.info(
                "admin API: %s %s refused (the %s token only reads) from %s",
                method,
                path,
                caller.token_name,
                client,
                extra={"event": "admin_write_refused", "token": caller.token_name},
            )
            raise

    @staticmethod
    def _route(path: str) -> tuple[str, str]:
        if path == MESSAGES_PATH:
            return "messages", ""
        if path.startswith(MESSAGES_PATH + "/") and len(path) > len(MESSAGES_PATH) + 1:
            rest = path[len(MESSAGES_PATH) + 1 :]
            segment, slash, action = rest.partition("/")
            if slash and action == REQUEUE and segment:
                return "requeue", parse_message_id(segment)
            if slash and action == RESCHEDULE and segment:
                return "reschedule", parse_message_id(segment)
            return "message", parse_message_id(rest)
        if path.startswith(BULK_PATH) and path[len(BULK_PATH) :] in BulkActions.ACTIONS:
            return "bulk", path[len(BULK_PATH) :]
        if path == DEAD_LETTERS_PATH:
            return "dead-letters", ""
        if path == DEAD_LETTERS_PATH + "/replay":
            return "replay", ""
        if path == PREFIX + "/stats":
            return "stats", ""
        if path == PREFIX + "/nodes":
            return "nodes", ""
        if path == PREFIX + "/tenants":
            return "tenants", ""
        if path == PREFIX + "/whoami":
            return "whoami", ""
        if path == PREFIX + "/pauses":
            return "pauses", ""
        if path == PREFIX + "/limits":
            return "limits", ""
        raise ApiError(404, "not found: see GET /admin/v1/openapi.json for the endpoints")

    @staticmethod
    def _allow(method: str, allowed: tuple[str, ...]) -> None:
        if method not in allowed:
            raise ApiError(
                405,
                f"method {method} not allowed here (allowed: {', '.join(allowed)})",
                {"Allow": ", ".join(allowed)},
            )

    # -- endpoints

    def get_message(self, message_id: str, query: str) -> Response:
        params = parse_query(query, frozenset({"include_value"}))
        include_value = parse_bool("include_value", params.get("include_value"))
        record = self.store.get_message(message_id, include_value=True)  # for the preview
        if record is None:
            raise ApiError(404, f"message {message_id[:MAX_ID_LENGTH]!r} is not scheduled")
        return _json(200, record_json(record, self.parked_at, include_value=include_value))

    def cancel_message(self, message_id: str, query: str, who: str) -> Response:
        parse_query(query, frozenset())
        outcome = self.store.cancel_message(message_id, self.settings.cancel_ttl_ms)
        if outcome is CancelOutcome.NOT_FOUND:
            raise ApiError(404, f"message {message_id!r} is not scheduled")
        if outcome is CancelOutcome.CLAIMED:
            raise ApiError(
                409,
                f"message {message_id!r} is claimed by a node and may be firing right now: "
                "that firing is not stopped, and nothing follows it (a series ends with it)",
            )
        log.info(
            "message %s cancelled through the admin API by %s",
            message_id,
            who,
            extra={"event": "message_cancelled", "message_id": message_id},
        )
        self.audit.message("cancelled", message_id, who)
        return 204, "application/json", b"", {}

    def requeue_message(self, message_id: str, query: str, who: str) -> Response:
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
        return 204, "application/json", b"", {}

    def reschedule_message(self, message_id: str, query: str, raw: bytes, who: str) -> Response:
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
        return _json(200, record_json(whole or record, self.parked_at, include_value=False))

    def list_messages(self, query: str) -> Response:
        p = parse_list_params(query, self.settings.output_topic)
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
        return _json(200, payload)

    def stats(self, query: str) -> Response:
        parse_query(query, frozenset())
        backlog = self.store.backlog(
            self.parked_at, exact_below=EXACT_COUNT_BELOW, count_limit=COUNT_LIMIT
        )
        return _json(200, stats_json(backlog, self.parked_at))

    def tenants(self, query: str) -> Response:
        params = parse_query(query, frozenset({"limit"}))
        limit = parse_limit(params.get("limit", str(self.settings.tenant_metrics_top)))
        backlogs = self.store.tenant_backlog(
            self.parked_at, limit=limit, count_limit=COUNT_LIMIT, max_tenants=TENANT_WALK_LIMIT
        )
        return _json(200, tenants_json(backlogs, limit))

    def nodes(self, query: str) -> Response:
        params = parse_query(query, frozenset({"include_dead"}))
        include_dead = parse_bool("include_dead", params.get("include_dead"))
        window_s = self.settings.liveness_window_ms / 1000
        nodes = self.store.list_nodes(window_s, include_dead=include_dead)
        leader = leader_of(nodes)
        return _json(
            200,
            {
                "nodes": [node_json(n, leader, self.settings.node_id) for n in nodes],
                "leader": leader,
                "liveness_window_seconds": window_s,
                "fired_per_second": cluster_fire_rate(nodes),
            },
        )


def admin_routes(settings: Settings, store: Store) -> Callable[..., Response | None]:
    """The route function ``chronos.node.http`` mounts: (handler, method, path, query) ->
    response."""
    api = AdminAPI(settings, store)

    def route(handler: Any, method: str, path: str, query: str) -> Response | None:
        client = handler.client_address[0] if handler.client_address else "-"

        def body() -> bytes:
            return read_body(handler.headers, handler.rfile)

        return api.handle(method, path, query, handler.headers, client, body)

    return route
