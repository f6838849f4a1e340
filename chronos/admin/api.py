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
       and its history; once it ended (fired, cancelled, expired, dead-lettered, replaced), how
       it ended and every record the history keeps of it (chronos.admin.history.api)
DELETE /admin/v1/messages/{id}   cancel a message (204); a claimed one: 202, its firing in
       flight not stopped, nothing following it
POST   /admin/v1/messages/{id}/requeue   requeue a parked message; 409 unless parked
POST   /admin/v1/messages/{id}/reschedule   move a waiting message to a new deadline:
       {"deadline": RFC 3339} or {"delay_ms": int} (from now, on the database clock);
       answers the message as GET does; 409 while claimed or parked
GET    /admin/v1/messages        find messages by filter (chronos.admin.messages.filters), by
       (deadline, id), cursor-paged and bounded by bytes; ``count=true`` adds how many match
POST   /admin/v1/bulk/cancel     cancel every message a filter matches (chronos.admin.messages.bulk)
POST   /admin/v1/bulk/reschedule move them: {"deadline"}, {"shift_ms"} or {"fire_now": true}
POST   /admin/v1/bulk/delete-tenant  ``?tenant=T``: delete everything of a tenant, its waiting
       messages and its history (``dry_run=true``: count them; chronos.admin.history.tenant)
GET    /admin/v1/history/summary ended messages by tenant and outcome over a window
       (``since``: an instant or a duration back, default 1h; ``until``; ``tenant``), with the
       fired ones' lateness p50 and p99
GET    /admin/v1/stats           counts by state, overdue, oldest/newest deadline
GET    /admin/v1/tenants         the busiest tenants: waiting, overdue, claimed, parked each
GET    /admin/v1/shards          each shard's database, up or not, with its counts; the map and
       the partitions moved away from it (chronos.admin.shards)
GET    /admin/v1/nodes           live nodes (heartbeats) and nodes holding claims, and the
       cluster's fire rate (the sum of the live nodes' own)
GET    /admin/v1/dead-letters    browse the dead-letter topic (``?reason=CODE``), cursor-paged
POST   /admin/v1/dead-letters/replay   replay chosen records or a reason's to the input topic,
       once each (chronos.admin.deadletters.api)
GET    /admin/v1/whoami          the caller's token and whether it may write (the console hides
       the actions a read-only token cannot take)
GET    /admin/v1/pauses          paused tenants and topics (chronos.admin.flow.api); POST pauses
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
from urllib.parse import parse_qs

from chronos.admin.access import Caller, Tokens
from chronos.admin.audit import AdminAudit
from chronos.admin.deadletters.api import DeadLetterEndpoints
from chronos.admin.flow.api import LimitEndpoints, PauseEndpoints
from chronos.admin.history.api import SUMMARY_PATH
from chronos.admin.history.tenant import DELETE_TENANT_PATH, TenantDeletion
from chronos.admin.messages.api import MESSAGES_PATH, MessageEndpoints
from chronos.admin.messages.bulk import BulkActions
from chronos.admin.messages.views import (
    TENANT_WALK_LIMIT,
    leader_of,
)
from chronos.admin.params import (
    ApiError,
    parse_message_id,
    parse_query,
    read_body,
)
from chronos.admin.shards import ShardEndpoints
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.store import (
    Store,
)

log = logging.getLogger(__name__)

PREFIX = "/admin/v1"
SPEC_PATH = PREFIX + "/openapi.json"
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


def _dry_run(query: str) -> bool:
    """Whether a bulk request asks for a dry run (its parameters are checked by the action)."""
    return parse_qs(query).get("dry_run", [""])[-1] == "true"


def _json(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    return status, "application/json", json.dumps(payload).encode("utf-8"), dict(headers or {})


# -- the API ---------------------------------------------------------------------------------


class AdminAPI:
    """Routes ``/admin/...`` requests; everything else is left to the other routes (None)."""

    def __init__(self, settings: Settings, store: Store):
        self.settings = settings
        self.store = store
        self.tokens = Tokens.of(settings)
        self.audit = AdminAudit(settings)  # CHRONOS_AUDIT_TOPIC: writes recorded by whom
        self.messages = MessageEndpoints(settings, store, self.audit)
        self.bulk = BulkActions(settings, store, self.messages.parked_at, self.audit)
        self.tenant_deletion = TenantDeletion(settings, store, self.messages.parked_at, self.audit)
        self.pauses = PauseEndpoints(store, self.audit)
        self.limits = LimitEndpoints(store, self.audit)
        self.dead_letters = DeadLetterEndpoints(settings, self.audit)
        self.shards = ShardEndpoints(settings, store, self.messages.parked_at)

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
            if not exc.refused:
                which = "the database" if exc.shard is None else f"shard {exc.shard}'s database"
                return _json(503, {"error": f"{which} is unavailable; try again"})
            # A missing grant or table: a retry will not help until an operator acts.
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else "refused"
            return _json(
                500,
                {
                    "error": f"the database refused the request: {reason} "
                    "(`chronos check` names a missing grant)"
                },
            )

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
        if method in WRITES and not (route in ("bulk", "delete-tenant") and _dry_run(query)):
            # A bulk dry run changes nothing: it counts, as the read-only token may.
            self._check_write(caller, method, path, client)
        who = f"the {caller.token_name} token from {client}"
        if route == "message":
            self._allow(method, ("GET", "DELETE"))
            if method == "GET":
                return self._reply(*self.messages.get(arg, query))
            return self._reply(*self.messages.cancel(arg, query, who))
        if route == "requeue":
            self._allow(method, ("POST",))
            return self._reply(*self.messages.requeue(arg, query, who))
        if route == "reschedule":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            return self._reply(*self.messages.reschedule(arg, query, raw, who))
        if route == "bulk":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            status, payload = self.bulk.run(arg, query, raw, who)
            return _json(status, payload)
        if route == "delete-tenant":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            return _json(*self.tenant_deletion.run(query, raw, who))
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
            return self._reply(*self.messages.find(query))
        if route == "stats":
            return self._reply(*self.messages.stats(query))
        if route == "tenants":
            return self._reply(*self.messages.tenants(query))
        if route == "shards":
            return self._reply(*self.shards.list(query))
        if route == "history-summary":
            return self._reply(*self.messages.history.summary(query))
        if route == "whoami":
            parse_query(query, frozenset())
            return _json(200, {"token": caller.token_name, "can_write": caller.can_write})
        return self._reply(*self.messages.nodes(query))

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
        if path == DELETE_TENANT_PATH:
            return "delete-tenant", ""
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
        if path == PREFIX + "/shards":
            return "shards", ""
        if path == SUMMARY_PATH:
            return "history-summary", ""
        if path == PREFIX + "/pauses":
            return "pauses", ""
        if path == PREFIX + "/limits":
            return "limits", ""
        raise ApiError(404, "not found: see GET /admin/v1/openapi.json for the endpoints")

    @staticmethod
    def _reply(status: int, payload: Any) -> Response:
        if payload is None:
            return status, "application/json", b"", {}
        return _json(status, payload)

    @staticmethod
    def _allow(method: str, allowed: tuple[str, ...]) -> None:
        if method not in allowed:
            raise ApiError(
                405,
                f"method {method} not allowed here (allowed: {', '.join(allowed)})",
                {"Allow": ", ".join(allowed)},
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
