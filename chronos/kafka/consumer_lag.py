"""The consumer lag, from librdkafka's statistics.

librdkafka's ``stats_cb`` (every ``statistics.interval.ms``, see ``chronos.kafka.make_consumer``)
hands over a JSON document; ``record_consumer_stats`` publishes, for the partitions assigned to
this node, the records not yet durably handled (high watermark minus the stored offset, else
minus the committed offset). ``sum()`` over nodes is the consumer group's lag. (The embedded
broker's ListOffsets high watermark is wrong; the statistics are right.)
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from chronos.observability import metrics

log = logging.getLogger(__name__)

CONSUMER_STATS_INTERVAL_MS = 5000

_lag_lock = threading.Lock()
_lag_labels: set[tuple[str, str]] = set()

# A partition this consumer fetches (assigned); "none"/"stopping"/"stopped" are not.
_FETCHING = frozenset({"offset-query", "offset-wait", "active"})


def partition_lags(stats: dict[str, Any]) -> dict[tuple[str, str], int]:
    """Lag per (topic, partition) assigned to this consumer, from one statistics document.

    High watermark minus the stored offset (records not yet durably handled), else minus the
    committed offset; partitions whose lag librdkafka does not know (-1) are left out.
    """
    lags: dict[tuple[str, str], int] = {}
    for topic, topic_stats in (stats.get("topics") or {}).items():
        for partition, p in (topic_stats.get("partitions") or {}).items():
            if partition == "-1" or not p.get("desired", True):
                continue
            if p.get("fetch_state") not in _FETCHING:
                continue
            lag = p.get("consumer_lag_stored", -1)
            if not isinstance(lag, int) or lag < 0:
                lag = p.get("consumer_lag", -1)
            if isinstance(lag, int) and lag >= 0:
                lags[(topic, str(partition))] = lag
    return lags


def record_consumer_stats(stats_json: str) -> None:
    """librdkafka ``stats_cb``: publish the consumer lag gauges (runs in the consumer's poll)."""
    try:
        lags = partition_lags(json.loads(stats_json))
    except (ValueError, TypeError, AttributeError) as exc:
        log.debug("unreadable consumer statistics: %s", exc)
        return
    with _lag_lock:
        for labels in _lag_labels - lags.keys():
            metrics.remove_series(metrics.CONSUMER_PARTITION_LAG, *labels)
        for (topic, partition), lag in lags.items():
            metrics.CONSUMER_PARTITION_LAG.labels(topic, partition).set(lag)
        _lag_labels.clear()
        _lag_labels.update(lags.keys())
        metrics.CONSUMER_LAG.set(sum(lags.values()))
