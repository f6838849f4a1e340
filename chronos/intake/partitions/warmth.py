"""When intake is warm without an assignment callback: a member of a KIP-848 group
(``group.protocol=consumer``) that the group leaves without partitions (more nodes than
partitions) is told nothing: librdkafka calls the assignment callback only when the assignment
changes, and its member id is made by the client before it joins. The consumer's statistics
show its group coordinator "up" for long enough for the broker to have answered its heartbeats:
then it is in the group, with nothing to consume (with the consumer's statistics turned off,
``statistics.interval.ms=0``, such a member stays "warming" until it is given a partition). Under
the classic protocol every member's assignment callback runs, even with an empty assignment."""

from __future__ import annotations

import json
import threading
from typing import Any

EMPTY_MEMBER_AFTER_MS = 5000
"""How long the coordinator must have been "up" with no assignment: the broker's default
consumer heartbeat interval (``group.consumer.heartbeat.interval.ms``)."""


def joined_without_partitions(stats_json: str, group_protocol: str) -> bool:
    """Whether these consumer statistics show a KIP-848 member in its group with no
    partitions, for ``EMPTY_MEMBER_AFTER_MS`` at least."""
    if group_protocol != "consumer":
        return False
    try:
        group: Any = json.loads(stats_json).get("cgrp", {})
        return bool(
            group.get("state") == "up"
            and int(group.get("assignment_size", 0)) == 0
            and int(group.get("stateage", 0)) >= EMPTY_MEMBER_AFTER_MS
        )
    except (ValueError, TypeError, AttributeError):
        return False


def warm_if_joined_without_partitions(
    stats_json: str, group_protocol: str, warm: threading.Event
) -> None:
    """Set ``warm`` (intake's) when the statistics show it in its group with no partitions."""
    if not warm.is_set() and joined_without_partitions(stats_json, group_protocol):
        warm.set()
