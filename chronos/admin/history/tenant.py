"""Delete everything of a tenant (``POST /admin/v1/bulk/delete-tenant?tenant=T``): its waiting
messages (cancelled as the bulk cancel cancels them: each a cancel marker, a claimed one left to
fire and recorded when it does) and its history, batch by batch, for at most ``BULK_BUDGET_S`` a
request (``complete: false``: send it again; it goes on where it stopped). ``dry_run=true`` counts
what would go and changes nothing, as the read-only token may. Logged and audited (the audit
topic's ``bulk`` record) with who did it."""

from __future__ import annotations

import logging
import time
from typing import Any

from chronos.admin.audit import AdminAudit
from chronos.admin.messages.bulk import BULK_BUDGET_S, DRY_RUN_COUNT_LIMIT
from chronos.admin.params import ApiError, parse_bool, parse_query
from chronos.config.settings import Settings
from chronos.protocol import MAX_ID_LENGTH
from chronos.store import BULK_BATCH, MessageFilter, Store

log = logging.getLogger(__name__)

DELETE_TENANT_PATH = "/admin/v1/bulk/delete-tenant"
PARAMS = frozenset({"tenant", "dry_run"})

Reply = tuple[int, Any]


class TenantDeletion:
    def __init__(
        self, settings: Settings, store: Store, parked_at: int, audit: AdminAudit | None
    ) -> None:
        self.settings = settings
        self.store = store
        self.parked_at = parked_at
        self.audit = audit

    def run(self, query: str, raw: bytes, who: str) -> Reply:
        params = parse_query(query, PARAMS)
        if raw:
            raise ApiError(400, "a tenant's deletion takes no body: name the tenant in the query")
        tenant = params.get("tenant")
        if tenant is None or len(tenant) > MAX_ID_LENGTH or "\x00" in tenant:
            raise ApiError(400, f"tenant: required, at most {MAX_ID_LENGTH} characters, no NUL")
        where = MessageFilter(tenant=tenant)
        if parse_bool("dry_run", params.get("dry_run")):
            waiting = self.store.count_messages(
                where, park_attempts=self.parked_at, count_limit=DRY_RUN_COUNT_LIMIT
            )
            history = self.store.count_tenant_history(tenant, limit=DRY_RUN_COUNT_LIMIT)
            return 200, {
                "tenant": tenant,
                "dry_run": True,
                "messages": waiting.count,
                "messages_exact": waiting.exact,
                "history": history,
                "history_exact": history < DRY_RUN_COUNT_LIMIT,
            }
        return 200, self._delete(tenant, where, who)

    def _delete(self, tenant: str, where: MessageFilter, who: str) -> dict[str, Any]:
        started = time.monotonic()
        cancelled = claimed = deleted = 0
        after = None
        complete = False
        while time.monotonic() - started <= BULK_BUDGET_S:
            batch = self.store.bulk_cancel(
                where,
                park_attempts=self.parked_at,
                after=after,
                cancel_ttl_ms=self.settings.cancel_ttl_ms,
                by=who,
            )
            cancelled, claimed, after = cancelled + batch.done, claimed + batch.claimed, batch.after
            if after is None:
                break
        if after is None:  # the messages are done: now their history (theirs too)
            while time.monotonic() - started <= BULK_BUDGET_S:
                gone = self.store.delete_tenant_history(tenant, batch=BULK_BATCH)
                deleted += gone
                if gone == 0:
                    complete = True
                    break
        log.info(
            "tenant %r deleted through the admin API by %s: %d messages cancelled (%d claimed "
            "left to fire), %d history records deleted%s",
            tenant,
            who,
            cancelled,
            claimed,
            deleted,
            "" if complete else " (stopped at its time budget: send it again to go on)",
            extra={"event": "admin_tenant_deleted", "by": who, "tenant": tenant},
        )
        if self.audit is not None:
            self.audit.operator(
                "bulk",
                who,
                {"tenant": tenant},
                count=cancelled,
                details={
                    "action": "delete-tenant",
                    "claimed": claimed,
                    "history_deleted": deleted,
                    "complete": complete,
                },
            )
        return {
            "tenant": tenant,
            "dry_run": False,
            "cancelled": cancelled,
            "claimed": claimed,
            "history_deleted": deleted,
            "complete": complete,
        }
