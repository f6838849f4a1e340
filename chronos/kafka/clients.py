"""Kafka clients: construction with config passthrough, the Publisher interface, topic checks.

Producers are idempotent with ``acks=all`` and a delivery timeout shorter than the hold time, and
pick partitions like the Java client (murmur2), so same-key records keep their partition affinity.
Consumers store offsets only when told to (``enable.auto.offset.store=false``): offsets move once
a batch is durable, never before.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import socket
import ssl
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
    TopicCollection,
)
from confluent_kafka.admin import AclOperation, AdminClient

from chronos.config.settings import Settings, reveal_properties
from chronos.errors import BrokerUnreachableError, ConfigError, TopicMissingError
from chronos.kafka.consumer_lag import CONSUMER_STATS_INTERVAL_MS, record_consumer_stats
from chronos.observability.dependencies import KAFKA
from chronos.observability.logs import ThrottleFilter
from chronos.protocol import Headers

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[KafkaError | None], None]
# The producer's type for headers (a module constant: a type built inside ``produce`` would be
# built again for every record).
_ProducerHeaders = list[tuple[str, str | bytes | None]]

# How long a replaced producer may take to serve the reports of its purged records.
ABANDON_FLUSH_SECONDS = 0.5


class Publisher(Protocol):
    """What the loops need from a producer."""

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

    def __len__(self) -> int: ...


# librdkafka's own log lines go through Python logging (and so the JSON format when it is
# chosen) instead of straight to stderr; they are served by the clients' poll/consume calls.
LIBRDKAFKA_LOG = logging.getLogger("chronos.librdkafka")
# A broker away makes every client log each failed reconnect: one line a minute per kind.
LIBRDKAFKA_LOG.addFilter(ThrottleFilter())


RECONNECT_BACKOFF_MAX_MS = 1000


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
# The consumer keeps librdkafka's fetch.min.bytes (1): a fetch returns as soon as a record is
# there, so a message with a short delay is never held by the broker waiting for more bytes
# (measured: the broker's cost here is per second of idle fetching, not per record). An idle
# fetch waits at most fetch.wait.max.ms: short delays and the late fast path depend on it.
FETCH_WAIT_MAX_MS = 100


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
        }
    )
    conf.update(reveal_properties(settings.producer_properties))
    return conf


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
            "auto.commit.interval.ms": 1000,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
        }
    )
    conf.update(failover_config(settings))
    conf.update(reveal_properties(settings.consumer_properties))
    # At-least-once depends on these two; a passthrough must not silently break it.
    conf["enable.auto.offset.store"] = False
    return conf


# A dead node's input partitions move to a survivor after the session timeout (librdkafka's
# default, 45 s, silenced a dead node's input for a minute); the cooperative assignor lets
# survivors keep consuming their own partitions while the group rebalances.
SESSION_TIMEOUT_MS = 6000  # the smallest a Kafka broker accepts by default
HEARTBEAT_INTERVAL_MS = 1500


def failover_config(settings: Settings) -> dict[str, Any]:
    """Consumer-group settings for fast failover; any of them can be overridden by a
    pass-through property (CHRONOS_CONSUMER__SESSION_TIMEOUT_MS=...)."""
    conf: dict[str, Any] = {}
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
        self._producer = Producer(self._config)
        # Delivery callbacks of the current producer whose report has not been served yet.
        self._pending: dict[int, DeliveryCallback] = {}
        self._token = 0
        self._broken: KafkaError | None = None
        self.replacements = 0
        # Deliveries failing for this long without a success between them: a stuck producer
        # (e.g. an idempotent producer whose broker lost its state) is replaced too. The clock
        # starts at the first failure after a success, not at the last success: a refusal
        # after an idle minute is not a stuck producer.
        self._stuck_after = 2 * int(self._config.get("delivery.timeout.ms", 300000)) / 1000
        self._failing_since: float | None = None

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
            "producer failed for good (%s); replaced it",
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
        _msg: Message | None,
    ) -> None:
        """The delivery report of one record (``pending``: the callbacks of the producer it was
        produced on)."""
        on_delivery = pending.pop(token, None)
        if on_delivery is None:
            return  # already reported (abandoned with its replaced producer)
        if err is None:
            self._failing_since = None
            KAFKA.succeeded()
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

    def poll(self, timeout: float) -> int:
        self._renew_if_broken()
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float) -> int:
        self._renew_if_broken()
        return int(self._producer.flush(timeout))

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


# What librdkafka logs when the broker refuses the client's security settings: not an outage
# to wait for but a setting to fix (start-up stops with status 2, naming the settings).
_REFUSALS = (
    (
        re.compile(r"SASL .*(failed|authentication)", re.I),
        "Kafka refused the SASL authentication (CHRONOS_KAFKA__SASL_MECHANISMS, "
        "CHRONOS_KAFKA__SASL_USERNAME, CHRONOS_KAFKA__SASL_PASSWORD)",
    ),
    (
        # TLS 1.3: the server checks the client's certificate after the handshake, and answers
        # the first request with an alert (certificate required, unknown CA, bad certificate).
        re.compile(r"alert (certificate required|unknown ca|bad certificate)", re.I),
        "Kafka refused the client certificate (CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION, "
        "CHRONOS_KAFKA__SSL_KEY_LOCATION)",
    ),
    (
        re.compile(r"SSL handshake failed|certificate verify failed|ssl\.\w+\.location", re.I),
        "the TLS handshake with Kafka failed (CHRONOS_KAFKA__SECURITY_PROTOCOL, "
        "CHRONOS_KAFKA__SSL_CA_LOCATION, CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION, "
        "CHRONOS_KAFKA__SSL_KEY_LOCATION)",
    ),
    (
        re.compile(r"incorrect security\.protocol", re.I),
        "Kafka does not speak the configured protocol (CHRONOS_KAFKA__SECURITY_PROTOCOL)",
    ),
)
STARTUP_LOG = logging.getLogger("chronos.librdkafka.startup")
STARTUP_LOG.addFilter(ThrottleFilter())


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def tls_reason(config: dict[str, Any], timeout: float = 5.0) -> str | None:
    """Why the first bootstrap server's certificate is not trusted, in OpenSSL's words
    ("certificate has expired", "Hostname mismatch ..."): librdkafka says only "certificate
    verify failed". One handshake with the client's CA file, as librdkafka verifies (host name
    included); None if it succeeds or the server cannot be reached."""
    server = str(config.get("bootstrap.servers", "")).split(",")[0].strip()
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        return None
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    try:
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host.strip("[]")),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message)
    except (OSError, ValueError):
        return None


def refusal(lines: list[str]) -> str | None:
    """The security refusal among librdkafka's log lines, as an operator's message."""
    for pattern, what in _REFUSALS:
        for line in lines:
            if pattern.search(line):
                return f"{what}: {line.split(': ', 1)[-1][:300]}"
    return None


def reach_broker(settings: Settings, timeout: float = 15.0) -> tuple[AdminClient, Any]:
    """An admin client and the cluster's metadata. ConfigError naming the setting (and
    OpenSSL's reason) if the broker refuses the client's TLS or SASL settings;
    BrokerUnreachableError if it does not answer within ``timeout``."""
    collector = _Collector()
    STARTUP_LOG.addHandler(collector)
    config: dict[str, Any] = {**_common(settings), "logger": STARTUP_LOG}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout
    try:
        # Short attempts, the client's log read between them: a refusal (TLS, SASL) is named
        # within a few seconds instead of after the whole timeout.
        while True:
            try:
                left = deadline - time.monotonic()
                return admin, admin.list_topics(timeout=min(2.0, max(0.1, left)))
            except KafkaException as exc:
                admin.poll(0.2)  # serve the client's log lines: they say why
                refused = refusal(collector.lines)
                if refused is not None:
                    reason = tls_reason(config) if "certificate verify failed" in refused else None
                    raise ConfigError(refused + (f" ({reason})" if reason else "")) from None
                if time.monotonic() >= deadline:
                    raise BrokerUnreachableError(
                        f"cannot reach Kafka at {settings.kafka_bootstrap_servers} "
                        f"(CHRONOS_KAFKA_BOOTSTRAP_SERVERS): {exc}"
                    ) from exc
    finally:
        STARTUP_LOG.removeHandler(collector)


def check_topics(settings: Settings, timeout: float = 15.0) -> None:
    """Fail start-up with a clear message if a configured topic does not exist, or if the
    broker refuses the client's TLS or SASL settings (ConfigError); BrokerUnreachableError if
    the broker does not answer (start-up waits for it)."""
    admin, metadata = reach_broker(settings, timeout)
    wanted = {
        "CHRONOS_INPUT_TOPIC": settings.input_topic,
        "CHRONOS_OUTPUT_TOPIC": settings.output_topic,
    }
    if settings.dead_letter_topic:
        wanted["CHRONOS_DEAD_LETTER_TOPIC"] = settings.dead_letter_topic
    for env, topic in wanted.items():
        info = metadata.topics.get(topic)
        if info is not None and info.error is not None and info.error.code() in _DENIED:
            raise TopicMissingError(
                f"topic {topic!r} ({env}): this node is not authorized to use it ({info.error})"
            )
        if info is None or info.error is not None:
            raise TopicMissingError(f"topic {topic!r} ({env}) does not exist on the broker")
    check_access(admin, settings, timeout)


_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def check_access(admin: AdminClient, settings: Settings, timeout: float) -> None:
    """Where the broker reports the operations this client may perform on a topic (Kafka 2.3+
    with an authorizer), refuse to start without READ on the input topic or WRITE on the output
    and dead-letter topics: a dead-letter topic Chronos cannot write to would otherwise be found
    only when the first malformed record arrives. Brokers that do not report (no authorizer,
    or an older protocol) are not checked here; at run time a dead letter refused for longer
    than ``dead_letter_timeout_ms`` parks its input record instead of stalling intake."""
    needed = {
        settings.input_topic: ("CHRONOS_INPUT_TOPIC", AclOperation.READ),
        settings.output_topic: ("CHRONOS_OUTPUT_TOPIC", AclOperation.WRITE),
    }
    if settings.dead_letter_topic:
        needed[settings.dead_letter_topic] = ("CHRONOS_DEAD_LETTER_TOPIC", AclOperation.WRITE)
    try:
        futures = admin.describe_topics(
            TopicCollection(list(needed)),
            request_timeout=timeout,
            include_authorized_operations=True,
        )
    except (KafkaException, ValueError, TypeError) as exc:  # the call itself is unsupported
        log.info("cannot ask the broker for topic permissions: %s", exc)
        return
    for topic, future in futures.items():
        try:
            allowed = future.result().authorized_operations
        except KafkaException as exc:
            log.info("cannot ask the broker for the permissions on %s: %s", topic, exc)
            continue
        env, operation = needed[topic]
        if missing_operation(allowed, operation):
            raise TopicMissingError(
                f"topic {topic!r} ({env}): this node may not {operation.name} it "
                f"(the broker allows only {', '.join(sorted(o.name for o in allowed or ()))})"
            )


def missing_operation(allowed: list[AclOperation] | None, operation: AclOperation) -> bool:
    """True if the broker reported the allowed operations and ``operation`` is not among them.
    None or an empty list means the broker did not report them (a client allowed nothing could
    not have described the topic)."""
    if not allowed:
        return False
    return operation not in allowed and AclOperation.ALL not in allowed


# Broker refusals that retrying the same record cannot fix. The topic errors among them reach a
# delivery report only after the client retried them for the whole delivery timeout (a topic
# being created or a leader being elected is retried inside librdkafka): a topic that does not
# exist where the broker does not create topics, or that this node may not write, is then
# counted as a refused attempt, so the record ends on the dead-letter topic, not in a loop.
_PERMANENT_CODES = {
    getattr(KafkaError, name)
    for name in (
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_TOPIC",
        "TOPIC_AUTHORIZATION_FAILED",
        "TOPIC_EXCEPTION",
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "INVALID_RECORD",
        "CORRUPT_MESSAGE",
        "RECORD_LIST_TOO_LARGE",
        "_INVALID_ARG",
    )
    if hasattr(KafkaError, name)
}


def is_permanent(err: KafkaError | None) -> bool:
    return err is not None and err.code() in _PERMANENT_CODES
