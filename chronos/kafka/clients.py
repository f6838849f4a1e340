"""Kafka clients: the Publisher interface and the node's producer and consumer, built from
``chronos.kafka.config``; which broker errors are permanent."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)

from chronos.config.settings import Settings
from chronos.kafka.config import consumer_config, producer_config
from chronos.kafka.consumer_lag import CONSUMER_STATS_INTERVAL_MS, record_consumer_stats
from chronos.observability.dependencies import KAFKA
from chronos.protocol import Headers

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None], None]
# The producer's type for headers (a module constant: a type built inside ``produce`` would be
# built again for every record).
_ProducerHeaders = list[tuple[str, str | bytes | None]]

# How long a replaced producer may take to serve the reports of its purged records.
ABANDON_FLUSH_SECONDS = 0.5


class Publisher(Protocol):
    """What the loops need from a producer. ``position``: the partition and offset of the
    record whose delivery report is being served, read inside a delivery callback ((-1, -1)
    when unknown)."""

    position: tuple[int, int]

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_delivery: DeliveryCallback,
    ) -> None: ...

    def poll(self, timeout: float) -> int: ...

    def flush(self, timeout: float) -> int: ...

    def warm(self, topic: str, timeout: float) -> bool: ...

    def replace(self, cause: str) -> None:
        """Replace the producer (safe from another thread: done by the next produce or poll);
        the records it holds fail with a purge error, so their callers give them back."""
        ...

    def __len__(self) -> int: ...


_PRODUCER_BROKEN_CODES = {
    getattr(KafkaError, name)
    for name in (
        "_FATAL",
        "PRODUCER_FENCED",
        "_FENCED",
        "INVALID_PRODUCER_EPOCH",
        "UNKNOWN_PRODUCER_ID",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "INVALID_PRODUCER_ID_MAPPING",
    )
    if hasattr(KafkaError, name)
}


def breaks_producer(err: KafkaError | None) -> bool:
    return err is not None and (err.fatal() or err.code() in _PRODUCER_BROKEN_CODES)


class KafkaPublisher:
    """A confluent-kafka Producer behind the Publisher interface.

    An idempotent producer can fail for good (a fatal error after the broker lost its state, a
    fenced epoch after timed-out requests): every later record would fail too. The publisher then
    replaces its producer; the records of the old one are purged, so their callers see a failed
    (transient) delivery and retry them through the new producer.
    """

    def __init__(self, config: Mapping[str, Any]):
        self._config = dict(config)
        self._config["error_cb"] = self._on_error
        # Statistics tell ``warm`` what the producer is connected to (None: not asked for).
        self._connections: tuple[set[int], bool] | None = None
        self._warm = False
        if int(self._config.get("statistics.interval.ms", 0)) > 0:
            self._connections = (set(), False)
            self._config.setdefault("stats_cb", self._on_stats)
        self._producer = Producer(self._config)
        # Delivery callbacks of the current producer whose report has not been served yet.
        self._pending: dict[int, DeliveryCallback] = {}
        self._token = 0
        self._broken: KafkaError | str | None = None  # the cause of a replacement to come
        self.replacements = 0
        # Deliveries failing for this long without a success between them: a stuck producer
        # (e.g. an idempotent producer whose broker lost its state) is replaced too. The clock
        # starts at the first failure after a success, not at the last success: a refusal
        # after an idle minute is not a stuck producer.
        self._stuck_after = 2 * int(self._config.get("delivery.timeout.ms", 300000)) / 1000
        self._failing_since: float | None = None
        self.position = (-1, -1)

    def _on_error(self, err: KafkaError) -> None:
        if breaks_producer(err):
            self._broken = err
        else:
            log.debug("producer error: %s", err)

    def _renew_if_broken(self) -> None:
        if self._broken is None:
            return
        old, cause = self._producer, self._broken
        abandoned, self._pending = self._pending, {}
        self._producer = Producer(self._config)
        self._broken = None
        self._failing_since = None
        self.replacements += 1
        log.warning(
            "producer failed for good (%s); replaced it"
            if isinstance(cause, KafkaError)
            else "producer replaced: %s",
            cause,
            extra={"event": "producer_replaced"},
        )
        try:
            old.purge(in_queue=True, in_flight=True, blocking=False)
        except (KafkaException, RuntimeError) as exc:  # pragma: no cover - best effort
            log.debug("purge of the broken producer failed: %s", exc)
        # Serve the purged records' reports (their callers retry them). A non-blocking purge
        # hands in-flight records to librdkafka's background thread, so some reports would only
        # reach a later poll of a producer nobody polls again: report those here, once, with a
        # purge error. A report the old producer serves afterwards finds its record gone.
        old.flush(ABANDON_FLUSH_SECONDS)
        if abandoned:
            log.warning(
                "%d records of the replaced producer had no delivery report; failing them",
                len(abandoned),
                extra={"event": "producer_records_abandoned"},
            )
        purged = KafkaError(KafkaError._PURGE_INFLIGHT)
        while abandoned:
            _, callback = abandoned.popitem()
            callback(purged)

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_delivery: DeliveryCallback,
    ) -> None:
        if self._broken is not None:
            self._renew_if_broken()
        self._token += 1
        token, pending = self._token, self._pending
        pending[token] = on_delivery
        report = partial(self._report, pending, token)
        while True:
            try:
                self._producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=cast(_ProducerHeaders, headers) or None,
                    on_delivery=report,
                )
                return
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                self._producer.poll(0.05)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else KafkaError(KafkaError._FAIL)
                if breaks_producer(err):
                    self._broken = err
                report(err, None)
                return

    def _report(
        self,
        pending: dict[int, DeliveryCallback],
        token: int,
        err: KafkaError | None,
        msg: Message | None,
    ) -> None:
        """The delivery report of one record (``pending``: the callbacks of the producer it was
        produced on)."""
        on_delivery = pending.pop(token, None)
        if on_delivery is None:
            return  # already reported (abandoned with its replaced producer)
        if err is None:
            self._failing_since = None
            KAFKA.succeeded()
            if msg is not None:
                self.position = (msg.partition() or 0, msg.offset() or 0)
        elif breaks_producer(err):
            self._broken = err
        elif not is_permanent(err):  # a refusal of the record says the broker is fine
            now = time.monotonic()
            if self._failing_since is None:
                self._failing_since = now
            elif now - self._failing_since > self._stuck_after and not KAFKA.down:
                # Stuck — unless the broker is away, which explains it (a new producer would
                # wait for the broker just the same).
                self._broken = err
        on_delivery(err)

    def replace(self, cause: str) -> None:
        self._broken = cause  # an assignment: the polling thread replaces it at its next call

    def poll(self, timeout: float) -> int:
        self._renew_if_broken()
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        self._renew_if_broken()
        return int(self._producer.flush(timeout))

    def warm(self, topic: str, timeout: float) -> bool:
        """Before the first record: fetch ``topic``'s metadata (kept by the client: a first
        record finds its partitions and their leaders at once) and tell whether the producer is
        connected to every leader and holds its idempotence id (from its statistics: the
        ``firing`` producer connects to every broker, see ``chronos.kafka.config``). Produces
        nothing. A producer without statistics is warm once it has the metadata."""
        producer = self._producer
        try:
            metadata = producer.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            log.debug("producer warm-up: no metadata for %s: %s", topic, exc)
            return False
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return False
        leaders = {p.leader for p in found.partitions.values()}
        if -1 in leaders:  # a partition without a leader (an election under way)
            return False
        if self._connections is None:
            return True
        up, has_id = self._connections
        self._warm = leaders <= up and has_id
        return self._warm

    def _on_stats(self, stats_json: str) -> None:
        """The producer's statistics, read until it is warm: the brokers it is connected to (by
        node id) and whether it holds its idempotence id."""
        if self._warm:
            return
        try:
            stats = json.loads(stats_json)
            up = {
                int(b["nodeid"])
                for b in stats.get("brokers", {}).values()
                if b.get("state") == "UP" and int(b.get("nodeid", -1)) >= 0
            }
            idempotence = stats.get("eos", {}).get("idemp_state", "Assigned")
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            log.debug("unreadable producer statistics: %s", exc)
            return
        self._connections = (up, idempotence == "Assigned")

    def __len__(self) -> int:
        return len(self._pending)


def make_publisher(settings: Settings, purpose: str) -> KafkaPublisher:
    return KafkaPublisher(producer_config(settings, purpose))


def make_consumer(settings: Settings, **callbacks: Any) -> Consumer:
    conf = consumer_config(settings)
    # Consumer lag from librdkafka's statistics (chronos_consumer_lag_messages); a passthrough
    # statistics.interval.ms overrides the interval (0 turns the statistics off).
    conf.setdefault("statistics.interval.ms", CONSUMER_STATS_INTERVAL_MS)
    conf.setdefault("stats_cb", record_consumer_stats)
    conf.update(callbacks)
    return Consumer(conf)


def _codes(*names: str) -> set[int]:
    return {getattr(KafkaError, name) for name in names if hasattr(KafkaError, name)}


# Delivery errors that retrying does not fix. Of the topic: it may be created, or the node granted
# access, while a publish is retried with back-off. Of the record itself: refused again whenever
# it is sent, however long one waits.
_TOPIC_CODES = _codes(
    "UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "TOPIC_EXCEPTION"
)
_RECORD_CODES = _codes(
    "MSG_SIZE_TOO_LARGE",
    "_MSG_SIZE_TOO_LARGE",
    "INVALID_RECORD",
    "CORRUPT_MESSAGE",
    "RECORD_LIST_TOO_LARGE",
    "_INVALID_ARG",
)
_PERMANENT_CODES = _TOPIC_CODES | _RECORD_CODES


def is_refused_record(err: KafkaError | None) -> bool:
    """The broker (or the client) refuses the record itself, e.g. as too large: waiting before
    sending it again changes nothing."""
    return err is not None and err.code() in _RECORD_CODES


def is_permanent(err: KafkaError | None) -> bool:
    return err is not None and err.code() in _PERMANENT_CODES


DELIVERY_TIMED_OUT = "not delivered within CHRONOS_DELIVERY_TIMEOUT_MS"
DELIVERY_NOT_AUTHORIZED = "this node may not write the topic"
DELIVERY_TOPIC_MISSING = "the topic does not exist"
DELIVERY_TOO_LARGE = "the record is larger than the broker or topic accepts"
DELIVERY_REFUSED = "the broker refused the record"
DELIVERY_FAILED = "the delivery failed"
"""Why a delivery failed, in Chronos's words: the start of a row's last error (the admin API
shows it) and of a publish_failed dead letter's reason, whatever librdkafka's words after it."""
_DELIVERY_REASONS = {
    getattr(KafkaError, name): why
    for names, why in (
        (("_MSG_TIMED_OUT", "_TIMED_OUT", "REQUEST_TIMED_OUT"), DELIVERY_TIMED_OUT),
        (("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"), DELIVERY_NOT_AUTHORIZED),
        (("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "TOPIC_EXCEPTION"), DELIVERY_TOPIC_MISSING),
        (
            ("MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"),
            DELIVERY_TOO_LARGE,
        ),
        (("INVALID_RECORD", "CORRUPT_MESSAGE", "_INVALID_ARG"), DELIVERY_REFUSED),
    )
    for name in names
    if hasattr(KafkaError, name)
}


def delivery_error(err: KafkaError | None) -> str:
    """A failed delivery as a row's last error: one of the DELIVERY_* reasons, then the
    client's error (its code and words)."""
    if err is None:
        return DELIVERY_FAILED
    return f"{_DELIVERY_REASONS.get(err.code(), DELIVERY_FAILED)}: {err}"
