"""The admin API's flow control: pause and resume a tenant or a target topic cluster-wide, and
rate-limit it.

GET    /admin/v1/pauses                  what is paused, since when, by whom (oldest first)
POST   /admin/v1/pauses?tenant=T | ?topic=X    pause it (again: the first pause is kept)
DELETE /admin/v1/pauses?tenant=T | ?topic=X    resume it; 404 when it is not paused
GET    /admin/v1/limits                  the rate limits
POST   /admin/v1/limits?tenant=T | ?topic=X &per_second=N   limit it (replacing its limit)
DELETE /admin/v1/limits?tenant=T | ?topic=X    remove its limit; 404 when it has none

The pause is stored (``chronos_pauses``): every node reads it within a second, its claims skip
the paused messages, and what a node already claimed of them is given back, not fired. Paused
messages keep waiting; those that expire meanwhile are dead-lettered as expired. ``tenant=`` (empty)
is the default tenant; the output topic stands for the messages that name no topic. Each pause
and resume is logged with the token's name and the client's address, and the pause keeps them.

With ``CHRONOS_AUDIT_TOPIC`` set, each pause, resume, limit set and limit removed is also an
audit record (``paused``, ``resumed``, ``limited``; a removed limit is ``limited`` with
``details.per_second`` null): who (the token and the client), what (``target``: the tenant or
topic) and when. A refused or 404 request records nothing.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from chronos.admin.audit import AdminAudit
from chronos.admin.params import ApiError, format_timestamp, parse_query
from chronos.observability import audit
from chronos.protocol import MAX_ID_LENGTH
from chronos.store import Limit, Pause, PauseKind, Store

log = logging.getLogger(__name__)

MAX_NAME_LENGTH = 255  # chronos_pauses.name


def pause_json(pause: Pause) -> dict[str, Any]:
    return {
        "kind": pause.kind.value,
        "name": pause.name,
        "paused_at": format_timestamp(pause.paused_at),
        "paused_by": pause.paused_by,
    }


MAX_PER_SECOND = 1_000_000


def limit_json(limit: Limit) -> dict[str, Any]:
    return {
        "kind": limit.kind.value,
        "name": limit.name,
        "per_second": limit.per_second,
        "set_at": format_timestamp(limit.set_at),
        "set_by": limit.set_by,
    }


def parse_per_second(query: str) -> tuple[str, int]:
    """The query without ``per_second``, and ``per_second`` (1 to ``MAX_PER_SECOND``)."""
    params = parse_query(query, frozenset({"tenant", "topic", "per_second"}))
    raw = params.pop("per_second", None)
    if raw is None or not raw.isdigit() or not 1 <= int(raw) <= MAX_PER_SECOND:
        raise ApiError(400, f"per_second: a whole number of messages from 1 to {MAX_PER_SECOND}")
    return urlencode(params), int(raw)


def parse_target(query: str) -> tuple[PauseKind, str]:
    """``tenant=T`` or ``topic=X``, exactly one."""
    params = parse_query(query, frozenset({"tenant", "topic"}))
    if len(params) != 1:
        raise ApiError(400, "name exactly one of tenant=T (empty: the default tenant) or topic=X")
    ((kind, name),) = params.items()
    limit = MAX_ID_LENGTH if kind == "tenant" else MAX_NAME_LENGTH
    if len(name) > limit:
        raise ApiError(400, f"{kind}: at most {limit} characters")
    if kind == "topic" and not name:
        raise ApiError(400, "topic: a topic name is required")
    return PauseKind(kind), name


def _who(token_name: str, client: str) -> str:
    """The caller as the other admin audit records name it."""
    return f"the {token_name} token from {client}"


class PauseEndpoints:
    """Runs ``/admin/v1/pauses`` for ``chronos.admin.api``."""

    def __init__(self, store: Store, audit_trail: AdminAudit | None = None) -> None:
        self.store = store
        self.audit = audit_trail

    def list(self, query: str) -> tuple[int, dict[str, Any]]:
        parse_query(query, frozenset())
        return 200, {"pauses": [pause_json(p) for p in self.store.pauses()]}

    def pause(self, query: str, token_name: str, client: str) -> tuple[int, dict[str, Any]]:
        kind, name = parse_target(query)
        pause = self.store.pause(kind, name, f"{token_name} token from {client}"[:255])
        log.warning(
            "admin API: %s %r paused by the %s token from %s",
            kind.value,
            name,
            token_name,
            client,
            extra={"event": "paused", "kind": kind.value, "target": name, "token": token_name},
        )
        if self.audit is not None:
            self.audit.operator(audit.PAUSED, _who(token_name, client), {kind.value: name})
        return 200, pause_json(pause)

    def resume(self, query: str, token_name: str, client: str) -> tuple[int, dict[str, Any]]:
        kind, name = parse_target(query)
        pause = self.store.resume(kind, name)
        if pause is None:
            raise ApiError(404, f"{kind.value} {name!r} is not paused")
        log.warning(
            "admin API: %s %r resumed by the %s token from %s",
            kind.value,
            name,
            token_name,
            client,
            extra={"event": "resumed", "kind": kind.value, "target": name, "token": token_name},
        )
        if self.audit is not None:
            self.audit.operator(audit.RESUMED, _who(token_name, client), {kind.value: name})
        return 200, pause_json(pause)


class LimitEndpoints:
    """Runs ``/admin/v1/limits`` for ``chronos.admin.api``."""

    def __init__(self, store: Store, audit_trail: AdminAudit | None = None) -> None:
        self.store = store
        self.audit = audit_trail

    def list(self, query: str) -> tuple[int, dict[str, Any]]:
        parse_query(query, frozenset())
        return 200, {"limits": [limit_json(x) for x in self.store.limits()]}

    def set(self, query: str, token_name: str, client: str) -> tuple[int, dict[str, Any]]:
        rest, per_second = parse_per_second(query)
        kind, name = parse_target(rest)
        by = f"{token_name} token from {client}"[:255]
        limit = self.store.set_limit(kind, name, per_second, by)
        log.warning(
            "admin API: %s %r limited to %d messages per second by the %s token from %s",
            kind.value,
            name,
            per_second,
            token_name,
            client,
            extra={"event": "limited", "kind": kind.value, "target": name, "token": token_name},
        )
        if self.audit is not None:
            self.audit.operator(
                audit.LIMITED,
                _who(token_name, client),
                {kind.value: name},
                details={"per_second": per_second},
            )
        return 200, limit_json(limit)

    def clear(self, query: str, token_name: str, client: str) -> tuple[int, dict[str, Any]]:
        kind, name = parse_target(query)
        limit = self.store.clear_limit(kind, name)
        if limit is None:
            raise ApiError(404, f"{kind.value} {name!r} has no rate limit")
        log.warning(
            "admin API: the rate limit of %s %r removed by the %s token from %s",
            kind.value,
            name,
            token_name,
            client,
            extra={"event": "unlimited", "kind": kind.value, "target": name, "token": token_name},
        )
        if self.audit is not None:
            self.audit.operator(
                audit.LIMITED,
                _who(token_name, client),
                {kind.value: name},
                details={"per_second": None},
            )
        return 200, limit_json(limit)
