"""A KIP-848 member left without partitions gets no assignment callback: its statistics tell
intake it is in the group (and so warm)."""

from __future__ import annotations

import json
import threading

from chronos.intake.partitions.warmth import (
    EMPTY_MEMBER_AFTER_MS,
    joined_without_partitions,
    warm_if_joined_without_partitions,
)


def stats(state: str = "up", age: int = EMPTY_MEMBER_AFTER_MS, assigned: int = 0) -> str:
    return json.dumps(
        {
            "cgrp": {
                "state": state,
                "stateage": age,
                "join_state": "init",
                "assignment_size": assigned,
            }
        }
    )


def test_a_kip848_member_up_long_enough_with_no_partition_has_joined() -> None:
    assert joined_without_partitions(stats(), "consumer")


def test_not_before_the_coordinator_answered_for_a_heartbeat_interval() -> None:
    assert not joined_without_partitions(stats(state="query-coord"), "consumer")
    assert not joined_without_partitions(stats(age=EMPTY_MEMBER_AFTER_MS - 1), "consumer")


def test_a_member_with_partitions_is_told_by_its_assignment_callback_instead() -> None:
    assert not joined_without_partitions(stats(assigned=2), "consumer")


def test_the_classic_protocol_always_calls_back() -> None:
    assert not joined_without_partitions(stats(), "classic")


def test_unreadable_statistics_say_nothing() -> None:
    assert not joined_without_partitions("{not json", "consumer")
    assert not joined_without_partitions(json.dumps({"cgrp": []}), "consumer")


def test_the_event_is_set_once_joined() -> None:
    warm = threading.Event()
    warm_if_joined_without_partitions(stats(age=10), "consumer", warm)
    assert not warm.is_set()
    warm_if_joined_without_partitions(stats(), "consumer", warm)
    assert warm.is_set()
