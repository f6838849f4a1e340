"""Where a message the node never saw went: the input topic read back once a scenario's load is
over, while its broker still runs.

Run only when a scenario lost messages or its intake load is missing rows from the table. It
reads every partition of the input topic from its beginning with a fresh consumer and reports,
per load generator run, how many of its records the broker holds, and for each missing message
(the analysis's lost sample, the intake load's ids absent from the table) whether the broker holds
it and at which partition and offset. A missing message the broker holds was acknowledged, kept
and served to this reader: the node's consumer did not receive it. One the broker does not hold
was lost before it was stored (the producer reported no error).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from loadtest.harness import headers as h

READ_TIMEOUT_S = 60.0
MISSING_SAMPLE = 50


def read_input(bootstrap: str, topic: str, partitions: int) -> dict[str, tuple[int, int]]:
    """Every record of ``topic`` with a load generator id: id -> (partition, offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-input-audit",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    where: dict[str, tuple[int, int]] = {}
    at_end: set[int] = set()
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for record in consumer.consume(10_000, timeout=0.5):
                err = record.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(int(record.partition() or 0))
                    continue
                pairs = cast(list[tuple[str, bytes | None]], record.headers() or [])
                for name, value in pairs:
                    if name == h.ID and value is not None:
                        place = (int(record.partition() or 0), int(record.offset() or 0))
                        where[value.decode()] = place
                        break
    finally:
        consumer.close()
    return where


def audit_input(
    bootstrap: str,
    topic: str,
    partitions: int,
    runs: dict[str, int],
    missing: Iterable[str],
    *,
    read: Callable[[str, str, int], dict[str, tuple[int, int]]] = read_input,
) -> dict[str, Any]:
    """``runs``: run id -> messages sent; ``missing``: ids the node never handled."""
    where = read(bootstrap, topic, partitions)
    held = {run: sum(1 for i in where if i.startswith(f"{run}-")) for run in runs}
    found, absent = [], []
    for message_id in sorted(missing):
        place = where.get(message_id)
        if place is None:
            absent.append(message_id)
        else:
            found.append({"id": message_id, "partition": place[0], "offset": place[1]})
    return {
        "held": held,
        "sent": dict(runs),
        "missing_held": len(found),
        "missing_not_held": len(absent),
        "missing_held_sample": found[:MISSING_SAMPLE],
        "missing_not_held_sample": absent[:MISSING_SAMPLE],
    }
