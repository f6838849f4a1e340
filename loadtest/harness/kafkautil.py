"""Small helpers shared by the Kafka clients of the harness."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import TopicPartition


class FetchStates:
    """Tracks per-partition fetch states from librdkafka statistics (``stats_cb``).

    A consumer's position stays unset until it consumes a record, so "the start offset of every
    assigned partition has been resolved" is read from the statistics instead: the partition's
    ``fetch_state`` becomes ``active``. Independent of ListOffsets high watermarks.
    """

    def __init__(self) -> None:
        self.states: dict[tuple[str, int], str] = {}

    def config(self) -> dict[str, Any]:
        return {"statistics.interval.ms": 100, "stats_cb": self.on_stats}

    def on_stats(self, raw: str) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            return
        states: dict[tuple[str, int], str] = {}
        for topic, tinfo in (data.get("topics") or {}).items():
            for pid, pinfo in (tinfo.get("partitions") or {}).items():
                if pid != "-1":
                    states[(topic, int(pid))] = str(pinfo.get("fetch_state"))
        self.states = states

    def all_active(self, assignment: list[TopicPartition]) -> bool:
        return all(self.states.get((tp.topic, tp.partition)) == "active" for tp in assignment)

    def wait(
        self, assignment: list[TopicPartition], pump: Callable[[], None], timeout_s: float
    ) -> None:
        """Call ``pump`` (which must poll the consumer) until every partition is fetching."""
        deadline = time.monotonic() + timeout_s
        while not self.all_active(assignment):
            pump()
            if time.monotonic() > deadline:
                raise RuntimeError(f"start offsets not resolved within {timeout_s}s: {self.states}")
