"""Follow-ups not applied because they reached their message while it was claimed.

A cancel or a reschedule that reaches a message a node has already claimed (it is firing) is not
applied, by contract (docs/protocol.md): the message fires as first scheduled, the node logs
``action_cancel_claimed`` / ``action_reschedule_claimed`` with its id. On a machine where the
nodes fire late, some of the mix's follow-ups arrive so; the analysis reads those events from
the nodes' logs (``node-*.log``, JSON lines) and the mix's ``followups.parquet`` (each follow-up:
its message, the schedule that must then never fire, a reschedule's own fire), and judges the
run by what Chronos promised: the first schedule's fire expected, the reschedule's not. Any
other fire of a cancelled or replaced schedule, and any other missing fire, is still counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loadtest.harness.events import FOLLOWUPS_FILE

CLAIMED_EVENTS = frozenset({"action_cancel_claimed", "action_reschedule_claimed"})


def claimed_message_ids(results: Path) -> set[str]:
    """Ids of the messages a follow-up reached while they were claimed, from the nodes' logs."""
    ids: set[str] = set()
    for path in sorted(results.glob("node-*.log")):
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if "_claimed" not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if record.get("event") in CLAIMED_EVENTS and record.get("message_id"):
                    ids.add(str(record["message_id"]))
    return ids


@dataclass(frozen=True)
class NotApplied:
    """The follow-ups not applied: the schedules that fire after all (``never_ids``) and the
    reschedules' fires that are then not expected (``fire_ids``)."""

    cancels: int = 0
    reschedules: int = 0
    never_ids: list[str] = field(default_factory=list)
    fire_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"cancels": self.cancels, "reschedules": self.reschedules}


def not_applied(events: Path, claimed: set[str]) -> NotApplied:
    """The mix's follow-ups whose message is in ``claimed``."""
    path = events / FOLLOWUPS_FILE
    if not claimed or not path.exists():
        return NotApplied()
    table = pq.read_table(str(path))
    hit = table.filter(pc.is_in(table["message_id"], value_set=pa.array(sorted(claimed))))
    fires = [f for f in hit["fire_id"].to_pylist() if f is not None]
    return NotApplied(
        cancels=hit.num_rows - len(fires),
        reschedules=len(fires),
        never_ids=[str(n) for n in hit["never_id"].to_pylist()],
        fire_ids=fires,
    )
