"""The input audit's verdict on a canned read of the input topic: which missing messages the
broker holds (and where), which it does not, and how many records of each run it holds."""

from __future__ import annotations

from loadtest.bench.input_audit import audit_input


def test_missing_messages_are_found_in_the_topic_or_reported_absent() -> None:
    topic = {"a-0": (0, 0), "a-1": (1, 0), "a-2": (0, 1), "b-0": (2, 0)}
    result = audit_input(
        "unused:9092",
        "in",
        3,
        {"a": 3, "b": 2},
        ["a-2", "b-1"],
        read=lambda _bootstrap, _topic, _partitions: topic,
    )
    assert result["held"] == {"a": 3, "b": 1}
    assert result["missing_held"] == 1 and result["missing_not_held"] == 1
    assert result["missing_held_sample"] == [{"id": "a-2", "partition": 0, "offset": 1}]
    assert result["missing_not_held_sample"] == ["b-1"]
