"""chronosAction within a consumed batch: what intake sends to the store, and what it reports.

The enqueue statement takes each id once per batch, so the records of one batch that share an id
are folded first, in partition order, into the one whose effect is the same as applying them one
after the other:

* a cancel wins over everything before it, and everything after it (a cancelled id cannot be
  scheduled again for ``CHRONOS_CANCEL_TTL_MS``);
* a reschedule replaces an earlier schedule or reschedule;
* a schedule after a schedule or a reschedule is a duplicate (the id is waiting).

Outcomes of reschedules and cancels are counted (``chronos_actions_total``) and the unusual ones
(a cancel of an unknown or claimed id, a reschedule of a claimed one, a schedule dropped by a
cancel) logged; none of them is an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from chronos.kafka.audit import AuditTrail
from chronos.observability import audit, metrics
from chronos.protocol import Action, ScheduledMessage
from chronos.store import Outcome

log = logging.getLogger(__name__)

S = TypeVar("S")

ACTION_OUTCOMES = {
    Outcome.BLOCKED,
    Outcome.RESCHEDULED,
    Outcome.RESCHEDULE_CLAIMED,
    Outcome.CANCELLED,
    Outcome.CANCEL_CLAIMED,
    Outcome.CANCEL_UNKNOWN,
}

_LOGGED = {
    Outcome.BLOCKED: "%s of %s dropped: the id was cancelled within the cancel TTL",
    Outcome.RESCHEDULE_CLAIMED: "%s of %s not applied: the message is claimed (firing)",
    Outcome.CANCEL_CLAIMED: "%s of %s not applied: the message is claimed (firing)",
    Outcome.CANCEL_UNKNOWN: "%s of %s: no such message waiting (a marker is kept)",
}


class Folded(Generic[S]):
    """The messages of one batch, one per id, each with the source of the record that won."""

    def __init__(self) -> None:
        self.messages: list[ScheduledMessage] = []
        self.sources: list[S] = []
        self._index: dict[str, int] = {}
        self.duplicates = 0  # records whose effect is already in the batch (schedules)
        self.superseded = 0  # records replaced or dropped by a later or earlier action

    def add(self, message: ScheduledMessage, source: S) -> None:
        index = self._index.get(message.id)
        if index is None:
            self._index[message.id] = len(self.messages)
            self.messages.append(message)
            self.sources.append(source)
            return
        current = self.messages[index].action
        if message.action is Action.CANCEL or (
            message.action is Action.RESCHEDULE and current is not Action.CANCEL
        ):
            self.messages[index] = message
            self.sources[index] = source
            self.superseded += 1
        elif message.action is Action.SCHEDULE and current is not Action.CANCEL:
            self.duplicates += 1
        else:
            self.superseded += 1
            _count(message.action, Outcome.BLOCKED)


def _count(action: Action, outcome: Outcome) -> None:
    metrics.ACTIONS.labels(action.value, outcome.value).inc()


def report(messages: Sequence[ScheduledMessage], outcomes: Sequence[Outcome | str]) -> None:
    """Count the outcomes of reschedules and cancels, log the unusual ones."""
    for message, outcome in zip(messages, outcomes, strict=True):
        if not isinstance(outcome, Outcome) or outcome not in ACTION_OUTCOMES:
            continue
        _count(message.action, outcome)
        text = _LOGGED.get(outcome)
        if text is not None:
            log.info(
                text,
                message.action.value,
                message.id,
                extra={"event": "action_" + outcome.value, "message_id": message.id},
            )


_AUDITED = {Outcome.CANCELLED: audit.CANCELLED, Outcome.RESCHEDULED: audit.RESCHEDULED}


def audit_actions(
    trail: AuditTrail,
    node: str,
    messages: Sequence[ScheduledMessage],
    sources: Sequence[S],
    outcomes: Sequence[Outcome | str],
    where: Callable[[S], str],
) -> None:
    """Queue the audit events of the cancels and reschedules a durable batch applied (``by``
    the chronosAction record's topic/partition/offset) and write them."""
    now = time.time()
    for message, source, outcome in zip(messages, sources, outcomes, strict=True):
        event = _AUDITED.get(outcome) if isinstance(outcome, Outcome) else None
        if event is None:
            continue
        deadline = message.deadline.timestamp() if event == audit.RESCHEDULED else None
        trail.add(
            audit.action(
                event,
                node,
                message.id,
                now,
                via=audit.VIA_KAFKA,
                by=where(source),
                tenant=message.tenant,
                deadline=deadline,
            )
        )
    trail.write()
