"""Kafka client configuration: the one place every client's settings are built, so a security
setting (``security.protocol``, ``sasl.*``, ``ssl.*``, the OAUTHBEARER token provider) given once
reaches every client a node and the command line create.

Producers are idempotent with ``acks=all`` and a delivery timeout shorter than the hold time, and
pick partitions like the Java client (murmur2), so same-key records keep their partition affinity.
Consumers store offsets only when told to (``enable.auto.offset.store=false``): offsets move once
a batch is durable, never before.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from typing import Any, cast

from chronos.config.settings import Settings, reveal_properties
from chronos.errors import ConfigError
from chronos.observability import metrics
from chronos.observability.logs import ThrottleFilter

# librdkafka's own log lines go through Python logging (and so the JSON format when it is
# chosen) instead of straight to stderr; they are served by the clients' poll/consume calls.
LIBRDKAFKA_LOG = logging.getLogger("chronos.librdkafka")


class OutOfRangeCounter(logging.Filter):
    """Counts the consumer's resets of an offset the broker no longer has (records deleted before
    they were read: retention, DeleteRecords). librdkafka resets to the log start
    (``auto.offset.reset=earliest``) and says so only in a warning of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            text = record.getMessage()
            if text.startswith("OFFSET ") and "offset reset" in text and "out of range" in text:
                metrics.OFFSETS_OUT_OF_RANGE.inc()
        return True


LIBRDKAFKA_LOG.addFilter(OutOfRangeCounter())  # before the throttle: each one counts
# A broker away makes every client log each failed reconnect: one line a minute per kind.
LIBRDKAFKA_LOG.addFilter(ThrottleFilter())


RECONNECT_BACKOFF_MAX_MS = 1000
# librdkafka refreshes a topic's metadata every 5 min, and at once when a leader is reported
# gone; a broker killed outright stays its partitions' leader in the metadata until the
# controller fences it, and records for them wait in the client until it looks again. Half a
# second: they go to the new leader within that of the fencing, before the delivery timeout
# gives them up (a request a client makes twice a second, for the topics it uses).
METADATA_REFRESH_MS = 500


def admin_config(settings: Settings) -> dict[str, Any]:
    """The configuration of an admin client (start-up checks, the broker probe)."""
    return _common(settings)


AWS_MSK_IAM = "aws-msk-iam"


def oauth_callback(spec: str) -> Callable[[str], tuple[str, float]]:
    """The ``oauth_cb`` of CHRONOS_KAFKA_OAUTH_PROVIDER: AWS MSK IAM's signer, or a callable
    named ``module:function``. ConfigError naming the setting when it cannot be had."""
    if spec == AWS_MSK_IAM:
        return _aws_msk_iam()
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(
            f"CHRONOS_KAFKA_OAUTH_PROVIDER ({spec!r}) must be {AWS_MSK_IAM!r} or 'module:function'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"CHRONOS_KAFKA_OAUTH_PROVIDER ({spec!r}): cannot import {module_name!r}: {exc}"
        ) from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(
            f"CHRONOS_KAFKA_OAUTH_PROVIDER ({spec!r}): {module_name} has no callable "
            f"{function_name!r}"
        )
    return cast(Callable[[str], tuple[str, float]], function)


def _aws_msk_iam() -> Callable[[str], tuple[str, float]]:
    try:
        signer = importlib.import_module("aws_msk_iam_sasl_signer")
    except ImportError:
        raise ConfigError(
            f"CHRONOS_KAFKA_OAUTH_PROVIDER={AWS_MSK_IAM} needs the package "
            "aws-msk-iam-sasl-signer-python (pip install aws-msk-iam-sasl-signer-python)"
        ) from None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise ConfigError(
            f"CHRONOS_KAFKA_OAUTH_PROVIDER={AWS_MSK_IAM} needs the cluster's region in AWS_REGION"
        )

    def token(_config: str) -> tuple[str, float]:
        value, expiry_ms = signer.MSKAuthTokenProvider.generate_auth_token(region)
        return value, expiry_ms / 1000

    return token


def _common(settings: Settings) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": settings.kafka_bootstrap_servers,
        "client.id": f"chronos-{settings.node_id[:8]}",
        "logger": LIBRDKAFKA_LOG,
        # librdkafka backs off reconnects up to 10 s: a broker back from an outage would wait
        # that long for the clients to notice. Up to 1 s instead (a reconnect attempt a second
        # per client while it is away is nothing to a broker).
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
    }
    conf.update(reveal_properties(settings.kafka_properties))
    if settings.kafka_oauth_provider:
        conf["oauth_cb"] = oauth_callback(settings.kafka_oauth_provider)
    return conf


# A Kafka broker's cost grows with the number of requests more than with their size, so the
# clients default to fewer, larger requests. The firing producer waits little: its linger adds
# to when a fired record reaches the broker (the record's timestamp is taken when it is
# produced, and the timing advance covers a few milliseconds); the intake's producer (records
# published directly or dead-lettered, off the precision path) batches more. Every value can be
# overridden by the pass-through properties (CHRONOS_PRODUCER__LINGER_MS=...,
# CHRONOS_CONSUMER__FETCH_MIN_BYTES=...).
PRODUCER_LINGER_MS = {"firing": 2, "intake": 20, "import": 20}
DEFAULT_LINGER_MS = 5
# The firing producer is warm before the node reports ready (``KafkaPublisher.warm``): it keeps a
# connection to every broker (librdkafka otherwise connects to a partition's leader only when a
# first record is there for it; fired records may go to any topic) and its statistics, read
# until it is warm, say which brokers it is connected to (afterwards a statistics report costs
# the dispatcher a callback that returns at once, once a second).
FIRING_WARM_CONFIG = {"enable.sparse.connections": False, "statistics.interval.ms": 1000}
# The consumer keeps librdkafka's fetch.min.bytes (1): a fetch returns as soon as a record is
# there, so a message with a short delay is never held by the broker waiting for more bytes
# (measured: the broker's cost here is per second of idle fetching, not per record). An idle
# fetch waits at most fetch.wait.max.ms: short delays and the late fast path depend on it.
FETCH_WAIT_MAX_MS = 100
# librdkafka prefetches ahead of intake up to 100,000 records per partition and 64 MiB by
# default; intake takes CHRONOS_CONSUME_BATCH_SIZE records at a time, so a few batches ahead keep
# it busy. The bound keeps the intake process small: its memory, and the header probe's fork per
# batch, whose cost grows with the process's resident pages.
PREFETCH_BATCHES = 5
# The intake commits the offsets it stored (those of durable batches) this often. Whatever was
# stored but not yet committed when a node dies, or when the broker stops and the group moves
# its partitions on return, is read again by the next owner, and a record whose message had
# fired meanwhile fires again: every millisecond of this interval is a window of duplicates.
# A commit is one small request per consumer (5 a second is nothing to a group coordinator);
# librdkafka's default, 5 s, was 25 times the window.
COMMIT_INTERVAL_MS = 200
PREFETCH_KBYTES = 16 * 1024


def producer_config(settings: Settings, purpose: str) -> dict[str, Any]:
    conf = _common(settings)
    conf.update(
        {
            "client.id": f"chronos-{settings.node_id[:8]}-{purpose}",
            "enable.idempotence": True,
            "acks": "all",
            "delivery.timeout.ms": settings.delivery_timeout_ms,
            "request.timeout.ms": min(30000, settings.delivery_timeout_ms),
            "partitioner": "murmur2_random",
            "linger.ms": PRODUCER_LINGER_MS.get(purpose, DEFAULT_LINGER_MS),
            "batch.num.messages": 10000,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": max(100000, 2 * settings.max_in_flight),
            # The producer copies each record: bound its queue by the byte budget too
            # (librdkafka's default is 1 GiB).
            "queue.buffering.max.kbytes": max(1024, settings.max_in_flight_bytes // 1024),
            "topic.metadata.propagation.max.ms": unknown_topic_after_ms(settings),
        }
    )
    if purpose == "firing":
        conf.update(FIRING_WARM_CONFIG)
    conf.update(reveal_properties(settings.producer_properties))
    return conf


def unknown_topic_after_ms(settings: Settings) -> int:
    """How long a topic the broker does not know is waited for before its records fail with
    ``_UNKNOWN_TOPIC`` (a permanent refusal: counted as a publish attempt, so the message is
    dead-lettered after ``max_publish_attempts``). librdkafka waits 30 s, longer than a record's
    delivery timeout: every attempt then failed as a timeout (transient), the message was retried
    for ever and the producer replaced as stuck. Half the delivery timeout instead."""
    return max(1, min(30_000, settings.delivery_timeout_ms // 2))


def import_producer_config(settings: Settings) -> dict[str, Any]:
    """``chronos import``'s producer: a node's producer settings, but a file's records may wait
    for a slow broker as long as librdkafka's default allows (nothing is held meanwhile)."""
    conf = producer_config(settings, "import")
    conf["delivery.timeout.ms"] = 300_000
    conf["request.timeout.ms"] = 30_000
    conf.update(reveal_properties(settings.producer_properties))
    return conf


def tail_consumer_config(settings: Settings, group: str) -> dict[str, Any]:
    """``chronos tail``'s consumer: assigned partitions, nothing committed."""
    conf = _common(settings)
    conf.update({"client.id": f"chronos-{settings.node_id[:8]}-tail", "group.id": group})
    conf.update(reveal_properties(settings.consumer_properties))
    conf["enable.auto.commit"] = False
    return conf


def consumer_config(settings: Settings) -> dict[str, Any]:
    conf = _common(settings)
    conf.update(
        {
            "client.id": f"chronos-{settings.node_id[:8]}-intake",
            "group.id": settings.consumer_group,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": COMMIT_INTERVAL_MS,
            "enable.auto.offset.store": False,
            # An offset out of range (records deleted before they were read) resumes at the
            # log start, never at the end.
            "auto.offset.reset": "earliest",
            # Only committed transactions' records (librdkafka's default, said here).
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
            "queued.min.messages": PREFETCH_BATCHES * settings.consume_batch_size,
            "queued.max.messages.kbytes": PREFETCH_KBYTES,
        }
    )
    conf.update(failover_config(settings))
    conf.update(reveal_properties(settings.consumer_properties))
    # At-least-once depends on these two; a passthrough must not silently break it.
    conf["enable.auto.offset.store"] = False
    return conf


# A dead node's input partitions move to a survivor after the session timeout; the cooperative
# assignor lets survivors keep consuming their own partitions while the group rebalances. The
# session outlasts the group coordinator's move when its broker dies: at Kafka's default fencing
# (broker.session.timeout.ms 9 s) the coordinator answered again 11.6 s after a kill -9 of the
# broker that was also the active controller (the election first), and a broker that is only a
# follower of the offsets topic holds every offset commit - and the heartbeats queued behind it
# on the same connection - until it is fenced. A shorter session ends meanwhile: every node
# loses its whole assignment, waits out a rebalance (the fencing again) and replays what the
# group had not committed (copies of messages that had fired). Kafka's own default is 45 s; a
# cluster that fences faster can take a shorter one (CHRONOS_CONSUMER__SESSION_TIMEOUT_MS).
SESSION_TIMEOUT_MS = 20000
HEARTBEAT_INTERVAL_MS = 1500
# librdkafka asks which broker coordinates the group every 10 minutes, every minute while the one
# it knows is down: a consumer whose coordinator's broker died went on asking the dead broker's
# address (the metadata names it until it is fenced) and then waited up to a minute to ask
# again, its session ending meanwhile (20.2 s after a kill, the coordinator having moved at
# +12 s). Every 5 s instead: every 0.5 s while the coordinator is down (one small request).
COORDINATOR_QUERY_INTERVAL_MS = 5000


def failover_config(settings: Settings) -> dict[str, Any]:
    """Consumer-group settings for fast failover; any of them can be overridden by a
    pass-through property (CHRONOS_CONSUMER__SESSION_TIMEOUT_MS=...)."""
    conf: dict[str, Any] = {"coordinator.query.interval.ms": COORDINATOR_QUERY_INTERVAL_MS}
    if settings.group_protocol == "consumer":
        # KIP-848: the broker owns the session timeout, heartbeats and assignment.
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = SESSION_TIMEOUT_MS
        conf["heartbeat.interval.ms"] = HEARTBEAT_INTERVAL_MS
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    if settings.group_instance_id:
        conf["group.instance.id"] = settings.group_instance_id
    return conf


# Errors after which an (idempotent) producer never delivers again: it must be replaced.
