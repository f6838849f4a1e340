"""What the firing loop tells the history about a delivered batch: one ``Ending`` per fired claim
(fired to its topic, partition and offset, how late; expired or dead-lettered, with the reason
code), written by the statement that deletes (or advances) the rows. A series' occurrence is
recorded by a stateless rule that bounds its records (``chronos.store.history``). With
CHRONOS_HISTORY_FIRED=false a fired claim gets no record: only the failures are kept, and a
batch that only fired writes no history at all (``chronos.store.postgres.history``)."""

from __future__ import annotations

from collections.abc import Sequence

from chronos.config.settings import Settings
from chronos.firing.dispatcher import Timer
from chronos.store import Ending
from chronos.store.history import DEAD_LETTERED, EXPIRED, FIRED, record_occurrence


def endings(batch: Sequence[Timer], settings: Settings) -> list[Ending | None]:
    """The history entries of a delivered batch, claim by claim (None: not recorded: an
    occurrence of a series past its bound, a fired claim while fired messages are not recorded,
    or every one while the history is off)."""
    ttl = settings.history_ttl
    if not ttl:
        return [None] * len(batch)
    fired = settings.history_fired
    output, dead_letters = settings.output_topic, settings.dead_letter_topic
    ends: list[Ending | None] = []
    for timer in batch:
        row = timer.row
        partition, offset = timer.position or (None, None)
        late_ms = round(timer.lateness * 1000)
        if timer.dead_letter:  # dead-lettered, or dropped (no position: never published)
            outcome = EXPIRED if timer.reason == "expired" else DEAD_LETTERED
            topic = dead_letters if timer.position else None
            ends.append(Ending(outcome, topic, partition, offset, late_ms, timer.reason or None))
            continue
        if not fired:
            ends.append(None)
            continue
        following = timer.next_deadline
        if (
            row.recurrence is not None
            and following is not None
            and not record_occurrence(row.deadline, following.timestamp(), ttl)
        ):
            ends.append(None)
            continue
        topic = row.target_topic or output
        ends.append(Ending(FIRED, topic, partition, offset, late_ms, None))
    return ends
