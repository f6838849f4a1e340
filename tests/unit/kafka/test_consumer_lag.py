"""Consumer lag from librdkafka's statistics (chronos.kafka.consumer_lag): per partition, the sum,
and the consumer asking for the statistics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client import REGISTRY

from chronos.kafka import clients as kafka
from chronos.kafka import consumer_lag
from chronos.kafka.consumer_lag import partition_lags, record_consumer_stats
from tests.unit.admin.helpers import make_settings


def sample(name: str, labels: dict[str, str] | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


def _stats(partitions: dict[str, dict[str, Any]], topic: str = "in") -> str:
    return json.dumps({"name": "c", "topics": {topic: {"partitions": partitions}}})


def _p(
    lag_stored: int, lag: int = -1, state: str = "active", desired: bool = True
) -> dict[str, Any]:
    return {
        "fetch_state": state,
        "desired": desired,
        "consumer_lag_stored": lag_stored,
        "consumer_lag": lag,
    }


def test_partition_lags_prefer_the_stored_offset_and_skip_unknown_and_unassigned() -> None:
    stats = json.loads(
        _stats(
            {
                "0": _p(5, 9),
                "1": _p(-1, 7),  # nothing stored yet: the committed lag
                "2": _p(-1, -1),  # unknown: left out
                "3": _p(4, 4, state="none", desired=False),  # not assigned to this consumer
                "4": _p(3, 3, state="stopped"),
                "-1": _p(100, 100),  # librdkafka's internal partition
            }
        )
    )
    assert partition_lags(stats) == {("in", "0"): 5, ("in", "1"): 7}
    assert partition_lags({}) == {}


def test_consumer_stats_publish_the_sum_and_drop_revoked_partitions() -> None:
    record_consumer_stats(_stats({"0": _p(5), "1": _p(2)}, topic="lag-test"))
    assert sample("chronos_consumer_lag_messages") == 7
    labels = {"topic": "lag-test", "partition": "1"}
    assert sample("chronos_consumer_partition_lag_messages", labels) == 2
    record_consumer_stats(_stats({"0": _p(1)}, topic="lag-test"))  # partition 1 revoked
    assert sample("chronos_consumer_lag_messages") == 1
    assert sample("chronos_consumer_partition_lag_messages", labels) is None
    record_consumer_stats("not json")  # ignored
    assert sample("chronos_consumer_lag_messages") == 1


def test_the_consumer_reports_statistics_unless_a_passthrough_overrides_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(kafka, "Consumer", lambda conf: seen.append(conf))
    kafka.make_consumer(make_settings(), on_commit=print)
    assert seen[-1]["statistics.interval.ms"] == consumer_lag.CONSUMER_STATS_INTERVAL_MS
    assert seen[-1]["stats_cb"] is record_consumer_stats
    assert seen[-1]["on_commit"] is print
    kafka.make_consumer(make_settings(consumer_properties={"statistics.interval.ms": "0"}))
    assert seen[-1]["statistics.interval.ms"] == "0"
