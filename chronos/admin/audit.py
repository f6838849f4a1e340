"""The admin API's side of the audit trail: what an operator changed, by whom.

``AdminAudit.message`` records a write to one message (cancelled, rescheduled, requeued);
``AdminAudit.operator`` an action on many (a bulk action: its filter and count) or on flow
control (pause, resume, limit) — the endpoints that do those call it as they come. Both are
no-ops while ``CHRONOS_AUDIT_TOPIC`` is empty. The records go through a producer of their own,
made at the first write (the API's threads never share the firing loop's): produced and left to
the producer's background sending, never waited for by the request (best effort, like the rest
of the trail: chronos.kafka.audit).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from chronos.config.settings import Settings
from chronos.kafka import make_publisher
from chronos.kafka.audit import AuditTrail
from chronos.observability import audit


class AdminAudit:
    def __init__(self, settings: Settings, trail: AuditTrail | None = None):
        self.settings = settings
        self.node = settings.node_id
        self._trail = trail
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.settings.audit_topic)

    def message(
        self,
        event: str,
        message_id: str,
        by: str,
        *,
        deadline: float | None = None,
        claimed: bool = False,
    ) -> None:
        """A cancel, reschedule (``deadline``: the new one) or requeue through the admin API
        (``claimed``: a cancel of a claimed message, whose firing in flight is not stopped)."""
        if self.enabled:
            self._emit(
                audit.action(
                    event,
                    self.node,
                    message_id,
                    time.time(),
                    via=audit.VIA_ADMIN_API,
                    by=by,
                    deadline=deadline,
                    claimed=claimed,
                )
            )

    def operator(
        self,
        event: str,
        by: str,
        target: dict[str, Any],
        *,
        count: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """A bulk action (``event`` audit.BULK, ``target`` its filter, ``count`` the messages
        it applied to, ``details`` e.g. {"action": "cancel"}), or a pause, resume or limit."""
        if self.enabled:
            self._emit(
                audit.operator(
                    event,
                    self.node,
                    time.time(),
                    by=by,
                    target=target,
                    count=count,
                    details=details,
                )
            )

    def _emit(self, event: audit.Event) -> None:
        with self._lock:
            if self._trail is None:
                publisher = make_publisher(self.settings, "audit")
                self._trail = AuditTrail(publisher, self.settings.audit_topic)
            self._trail.add(event)
            self._trail.write()
            self._trail.publisher.poll(0)  # serve earlier reports (counted, never waited for)
