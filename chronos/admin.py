"""The admin HTTP API (``/admin/v1``): inspect, count, cancel and requeue messages; list nodes.

Mounted by ``chronos.http``; described by ``chronos/openapi.json``, served at
``GET /admin/v1/openapi.json`` without authentication (it holds no data). Every other endpoint
requires ``Authorization: Bearer <CHRONOS_ADMIN_TOKEN>``; without a configured token the whole
``/admin/`` tree answers 404 with a message saying how to enable it: the API is never open by
default. Errors are JSON ``{"error": "..."}``.

GET    /admin/v1/messages/{id}   one message (``?include_value=true`` adds its value)
DELETE /admin/v1/messages/{id}   cancel a waiting (or parked) message; 409 while claimed
POST   /admin/v1/messages/{id}/requeue   requeue a parked message; 409 unless parked
POST   /admin/v1/messages/{id}/reschedule   move a waiting message to a new deadline:
       {"deadline": RFC 3339} or {"delay_ms": int} (from now, on the database clock);
       answers the message as GET does; 409 while claimed or parked
GET    /admin/v1/messages        list, filtered by state and deadline, keyset-paginated
GET    /admin/v1/stats           counts by state, overdue, oldest/newest deadline
GET    /admin/v1/nodes           live nodes (heartbeats) and nodes holding claims

Message states: ``waiting`` (unclaimed), ``claimed`` (a node readied it and is firing it) and
``parked`` (unclaimed, its publish failed ``2 * max_publish_attempts`` times: never claimed
again until requeued or cancelled). Keys, values and header values are bytes, shown in base64.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, unquote

from chronos.errors import StoreError
from chronos.leadership import lowest_id
from chronos.monitor import COUNT_LIMIT, EXACT_COUNT_BELOW
from chronos.policy import park_after
from chronos.protocol import MAX_ID_LENGTH, b64
from chronos.settings import Settings
from chronos.store import (
    Backlog,
    CancelOutcome,
    MessageRecord,
    NodeRecord,
    RequeueOutcome,
    RescheduleOutcome,
    Store,
)

log = logging.getLogger(__name__)

PREFIX = "/admin/v1"
SPEC_PATH = PREFIX + "/openapi.json"
MESSAGES_PATH = PREFIX + "/messages"
REQUEUE = "requeue"  # POST MESSAGES_PATH/{id}/requeue
RESCHEDULE = "reschedule"  # POST MESSAGES_PATH/{id}/reschedule
MAX_BODY_BYTES = 4096  # a request body (only reschedule takes one) larger than this is a 413
MAX_DELAY_MS = 100 * 366 * 86_400_000  # a century: delay_ms beyond it is a 400
STATES = ("waiting", "claimed", "parked")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
CURSOR_VERSION = 1
_MAX_CURSOR_LENGTH = 1024
_MAX_TIMESTAMP_LENGTH = 64
_LIMIT_RE = re.compile(r"^[0-9]{1,7}$")
_RFC3339_RE = re.compile(
    r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt](?P<hm>[0-9]{2}:[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?P<fraction>\.[0-9]+)?(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})$"
)

Response = tuple[int, str, bytes, dict[str, str]]

DISABLED_MESSAGE = (
    "the admin API is disabled on this node: set CHRONOS_ADMIN_TOKEN (--admin-token) to enable it"
)


class ApiError(Exception):
    """An HTTP error answered as ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


# -- authentication --------------------------------------------------------------------------


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def check_auth(authorization: str | None, expected: str) -> None:
    """Raise 401 unless the header carries ``expected`` (compared in constant time)."""
    token = bearer_token(authorization)
    if token is None:
        raise ApiError(
            401,
            "missing bearer token: send Authorization: Bearer <CHRONOS_ADMIN_TOKEN>",
            {"WWW-Authenticate": 'Bearer realm="chronos-admin"'},
        )
    if not hmac.compare_digest(
        token.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    ):
        raise ApiError(
            401,
            "invalid bearer token",
            {"WWW-Authenticate": 'Bearer realm="chronos-admin", error="invalid_token"'},
        )


# -- cursors and parameters ------------------------------------------------------------------


def encode_cursor(deadline: datetime, message_id: str) -> str:
    """An opaque page token for "after (deadline, id)": URL-safe base64 of a small JSON."""
    payload = json.dumps(
        {"v": CURSOR_VERSION, "d": format_timestamp(deadline), "i": message_id},
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(payload.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, str]:
    """The (deadline, id) a cursor encodes; ApiError 400 for anything not made by encode_cursor."""
    invalid = ApiError(400, "invalid cursor: pass next_cursor of a previous page unchanged")
    if not token or len(token) > _MAX_CURSOR_LENGTH:
        raise invalid
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        raise invalid from None
    if not isinstance(payload, dict) or payload.get("v") != CURSOR_VERSION:
        raise invalid
    deadline_text, message_id = payload.get("d"), payload.get("i")
    if not isinstance(deadline_text, str) or not isinstance(message_id, str):
        raise invalid
    if not valid_id(message_id):
        raise invalid
    try:
        deadline = datetime.fromisoformat(deadline_text)
    except ValueError:
        raise invalid from None
    if deadline.tzinfo is None:
        raise invalid
    return deadline, message_id


def valid_id(message_id: str) -> bool:
    return 0 < len(message_id) <= MAX_ID_LENGTH and "\x00" not in message_id


_TIMESTAMP_MIN = datetime.min.replace(tzinfo=UTC)
_TIMESTAMP_MAX = datetime.max.replace(tzinfo=UTC)


def parse_timestamp(name: str, raw: str) -> datetime:
    """An RFC 3339 date-time (``2026-01-31T12:00:00Z``, ``...T13:00:00.5+01:00``) as an aware
    UTC datetime; anything else (no offset, a date alone) is a 400 naming the parameter.

    Instants beyond what Python represents (after applying the offset) are clamped: as bounds
    they mean "unbounded" either way; a leap second reads as the end of the second before.
    """
    match = _RFC3339_RE.fullmatch(raw) if len(raw) <= _MAX_TIMESTAMP_LENGTH else None
    if match is None:
        raise ApiError(
            400,
            f"{name}: expected an RFC 3339 instant with an offset, like 2026-01-31T12:00:00Z",
        )
    seconds, fraction = match["second"], match["fraction"] or ""
    if seconds == "60":
        seconds, fraction = "59", ".999999"
    offset = "+00:00" if match["offset"] in ("Z", "z") else match["offset"]
    text = f"{match['date']}T{match['hm']}:{seconds}{fraction[:7]}{offset}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(400, f"{name}: {raw[:40]!r} is not a valid instant") from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return _TIMESTAMP_MIN if parsed.year == datetime.min.year else _TIMESTAMP_MAX


def format_timestamp(value: datetime | None) -> str | None:
    """UTC, microseconds kept, ``Z`` suffix."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_query(query: str, allowed: frozenset[str]) -> dict[str, str]:
    """Query parameters; 400 for an unknown or repeated one, or undecodable text."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the query string is not valid percent-encoded UTF-8") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ApiError(400, f"unknown query parameter {name[:40]!r} (known: {known})")
        if name in params:
            raise ApiError(400, f"query parameter {name!r} is repeated")
        if "\x00" in value:
            raise ApiError(400, f"query parameter {name!r} contains a NUL character")
        params[name] = value
    return params


def parse_bool(name: str, raw: str | None, default: bool = False) -> bool:
    if raw is None:
        return default
    if raw == "true":
        return True
    if raw == "false":
        return False
    raise ApiError(400, f"{name}: expected true or false")


def parse_limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    if not _LIMIT_RE.fullmatch(raw) or not 1 <= int(raw) <= MAX_LIMIT:
        raise ApiError(400, f"limit: expected an integer from 1 to {MAX_LIMIT}")
    return int(raw)


def parse_message_id(raw_segment: str) -> str:
    """The message id of a path segment (percent-decoded UTF-8); 400 if it cannot be an id."""
    try:
        message_id = unquote(raw_segment, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "message id: not valid percent-encoded UTF-8") from None
    if not valid_id(message_id):
        raise ApiError(
            400, f"message id: expected 1 to {MAX_ID_LENGTH} characters, no NUL character"
        )
    return message_id


@dataclass(frozen=True, slots=True)
class ListParams:
    state: str | None
    deadline_from: datetime | None
    deadline_to: datetime | None
    limit: int
    after: tuple[datetime, str] | None


LIST_PARAMS = frozenset({"state", "deadline_from", "deadline_to", "limit", "cursor"})


def parse_list_params(query: str) -> ListParams:
    params = parse_query(query, LIST_PARAMS)
    state = params.get("state")
    if state is not None and state not in STATES:
        raise ApiError(400, f"state: expected one of {', '.join(STATES)}")
    bounds = {
        name: parse_timestamp(name, params[name]) if name in params else None
        for name in ("deadline_from", "deadline_to")
    }
    cursor = params.get("cursor")
    return ListParams(
        state=state,
        deadline_from=bounds["deadline_from"],
        deadline_to=bounds["deadline_to"],
        limit=parse_limit(params.get("limit")),
        after=decode_cursor(cursor) if cursor is not None else None,
    )


@dataclass(frozen=True, slots=True)
class RescheduleBody:
    deadline: datetime | None
    delay_ms: int | None


def parse_reschedule_body(raw: bytes) -> RescheduleBody:
    """``{"deadline": "<RFC 3339>"}`` or ``{"delay_ms": <int>}``: exactly one, nothing else."""
    usage = 'expected a JSON object with exactly one of "deadline" (RFC 3339) and "delay_ms"'
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, f"the body is not JSON: {usage}") from None
    if not isinstance(body, dict):
        raise ApiError(400, usage)
    unknown = sorted(set(body) - {"deadline", "delay_ms"})
    if unknown or len(body) != 1:
        raise ApiError(400, usage + (f" (unknown: {unknown[0][:40]!r})" if unknown else ""))
    if "deadline" in body:
        if not isinstance(body["deadline"], str):
            raise ApiError(400, "deadline: expected an RFC 3339 string")
        return RescheduleBody(parse_timestamp("deadline", body["deadline"]), None)
    delay = body["delay_ms"]
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY_MS:
        raise ApiError(400, f"delay_ms: expected an integer from 0 to {MAX_DELAY_MS}")
    return RescheduleBody(None, delay)


def read_body(headers: Mapping[str, str], rfile: Any) -> bytes:
    """The request body (by Content-Length; none without one), at most MAX_BODY_BYTES."""
    length = headers.get("Content-Length")
    if length is None:
        return b""
    if not length.strip().isdigit():
        raise ApiError(400, "Content-Length is not a number")
    size = int(length)
    if size > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    return bytes(rfile.read(size)) if size else b""


# -- representations -------------------------------------------------------------------------


def message_json(record: MessageRecord, parked_at: int, *, include_value: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": record.id,
        "state": record.state(parked_at),
        "deadline": format_timestamp(record.deadline),
        "readied_at": format_timestamp(record.readied_at),
        "claimed_by": record.readied_by,
        "attempts": record.attempts,
        "last_error": record.last_error,
        "target_topic": record.target_topic,
        "enqueued_at": format_timestamp(record.enqueued_at),
        "key": b64(record.key),
        "headers": [{"name": name, "value": b64(value)} for name, value in record.headers],
        "value_size": record.value_size,
    }
    if include_value:
        body["value"] = b64(record.value)
    return body


def stats_json(backlog: Backlog, parked_at: int) -> dict[str, Any]:
    return {
        "waiting": backlog.waiting,
        "waiting_exact": backlog.unclaimed_exact and not backlog.parked_capped,
        "claimed": backlog.claimed,
        "parked": backlog.parked,
        "parked_exact": not backlog.parked_capped,
        "overdue": backlog.overdue,
        "overdue_exact": not backlog.overdue_capped,
        "oldest_overdue_age_seconds": backlog.oldest_overdue_seconds,
        "oldest_deadline": format_timestamp(backlog.oldest_deadline),
        "newest_deadline": format_timestamp(backlog.newest_deadline),
        "estimated_rows": backlog.estimated_rows,
        "exact_count_below": EXACT_COUNT_BELOW,
        "count_limit": COUNT_LIMIT,
        "park_attempts": parked_at,
        "database_time": format_timestamp(backlog.now),
    }


def leader_of(nodes: list[NodeRecord]) -> str | None:
    """The lowest node id among live nodes (uuid order), or None when no node is live: the node
    the election (``chronos.leadership``) makes the leader."""
    return lowest_id([n.node_id for n in nodes if n.live])


def node_json(node: NodeRecord, leader: str | None, this_node: str) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "live": node.live,
        "leader": node.node_id == leader,
        "this_node": node.node_id == this_node,
        "hostname": node.hostname,
        "version": node.version,
        "started_at": format_timestamp(node.started_at),
        "heartbeat_at": format_timestamp(node.heartbeat_at),
        "heartbeat_age_seconds": node.heartbeat_age_seconds,
        "claimed": node.claimed,
        "oldest_claim_at": format_timestamp(node.oldest_claim_at),
    }


@cache
def openapi_document() -> bytes:
    return resources.files("chronos").joinpath("openapi.json").read_bytes()


def _json(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Response:
    return status, "application/json", json.dumps(payload).encode("utf-8"), dict(headers or {})


# -- the API ---------------------------------------------------------------------------------


class AdminAPI:
    """Routes ``/admin/...`` requests; everything else is left to the other routes (None)."""

    def __init__(self, settings: Settings, store: Store):
        self.settings = settings
        self.store = store
        self.token = settings.admin_token.reveal() if settings.admin_token else ""
        self.parked_at = park_after(settings)

    @property
    def enabled(self) -> bool:
        return bool(self.token)

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
            check_auth(headers.get("Authorization"), self.token)
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
        if route == "message":
            self._allow(method, ("GET", "DELETE"))
            if method == "GET":
                return self.get_message(arg, query)
            return self.cancel_message(arg, query, client)
        if route == "requeue":
            self._allow(method, ("POST",))
            return self.requeue_message(arg, query, client)
        if route == "reschedule":
            self._allow(method, ("POST",))
            raw = body() if callable(body) else body
            return self.reschedule_message(arg, query, raw, client)
        self._allow(method, ("GET",))
        if route == "messages":
            return self.list_messages(query)
        if route == "stats":
            return self.stats(query)
        return self.nodes(query)

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
        if path == PREFIX + "/stats":
            return "stats", ""
        if path == PREFIX + "/nodes":
            return "nodes", ""
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
        record = self.store.get_message(message_id, include_value=include_value)
        if record is None:
            raise ApiError(404, f"message {message_id[:MAX_ID_LENGTH]!r} is not scheduled")
        return _json(200, message_json(record, self.parked_at, include_value=include_value))

    def cancel_message(self, message_id: str, query: str, client: str) -> Response:
        parse_query(query, frozenset())
        outcome = self.store.cancel_message(message_id)
        if outcome is CancelOutcome.NOT_FOUND:
            raise ApiError(404, f"message {message_id!r} is not scheduled")
        if outcome is CancelOutcome.CLAIMED:
            raise ApiError(
                409,
                f"message {message_id!r} is claimed by a node and may be firing right now; "
                "it cannot be cancelled",
            )
        log.info(
            "message %s cancelled through the admin API by %s",
            message_id,
            client,
            extra={"event": "message_cancelled", "message_id": message_id},
        )
        return 204, "application/json", b"", {}

    def requeue_message(self, message_id: str, query: str, client: str) -> Response:
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
            client,
            extra={"event": "message_requeued", "message_id": message_id},
        )
        return 204, "application/json", b"", {}

    def reschedule_message(self, message_id: str, query: str, raw: bytes, client: str) -> Response:
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
            client,
            extra={"event": "message_rescheduled", "message_id": message_id},
        )
        return _json(200, message_json(record, self.parked_at, include_value=False))

    def list_messages(self, query: str) -> Response:
        p = parse_list_params(query)
        records = self.store.list_messages(
            state=p.state,
            park_attempts=self.parked_at,
            limit=p.limit + 1,
            deadline_from=p.deadline_from,
            deadline_to=p.deadline_to,
            after=p.after,
        )
        page = records[: p.limit]
        next_cursor = (
            encode_cursor(page[-1].deadline, page[-1].id) if len(records) > p.limit else None
        )
        return _json(
            200,
            {
                "messages": [message_json(r, self.parked_at, include_value=False) for r in page],
                "next_cursor": next_cursor,
            },
        )

    def stats(self, query: str) -> Response:
        parse_query(query, frozenset())
        backlog = self.store.backlog(
            self.parked_at, exact_below=EXACT_COUNT_BELOW, count_limit=COUNT_LIMIT
        )
        return _json(200, stats_json(backlog, self.parked_at))

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
            },
        )


def admin_routes(settings: Settings, store: Store) -> Callable[..., Response | None]:
    """The route function ``chronos.http`` mounts: (handler, method, path, query) -> response."""
    api = AdminAPI(settings, store)

    def route(handler: Any, method: str, path: str, query: str) -> Response | None:
        client = handler.client_address[0] if handler.client_address else "-"

        def body() -> bytes:
            return read_body(handler.headers, handler.rfile)

        return api.handle(method, path, query, handler.headers, client, body)

    return route
