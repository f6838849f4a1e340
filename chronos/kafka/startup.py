"""Start-up checks of the broker: reach it, name what it refuses (TLS, SASL: the setting and
OpenSSL's reason), check the configured topics exist and may be used."""

from __future__ import annotations

import logging
import os
import re
import socket
import ssl
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient

from chronos.config.settings import Settings
from chronos.config.shards import layout
from chronos.errors import BrokerUnreachableError, ConfigError, TopicMissingError
from chronos.kafka.config import _common
from chronos.observability.logs import ThrottleFilter

log = logging.getLogger(__name__)

SASL_REFUSED = "Kafka refused the SASL authentication"
CLIENT_CERTIFICATE_REFUSED = "Kafka refused the client certificate"
TLS_HANDSHAKE_FAILED = "the TLS handshake with Kafka failed"
PROTOCOL_MISMATCH = "Kafka does not speak the configured protocol"
"""The start of each refusal's message: what Chronos promises to say, whatever the TLS library's
or the broker's own words after it."""

CERTIFICATE_UNTRUSTED = "no CA the client trusts signed the broker's certificate"
CERTIFICATE_EXPIRED = "the broker's certificate has expired or is not valid yet"
CERTIFICATE_OTHER_HOST = "the broker's certificate is for another host"
CERTIFICATE_INVALID = "the broker's certificate is not valid"
"""Why the broker's certificate is not trusted (``tls_reason``), after the TLS refusal: from
OpenSSL's verification code, whatever its words."""
_CERTIFICATE_REASONS = {
    **dict.fromkeys((2, 18, 19, 20, 21, 27), CERTIFICATE_UNTRUSTED),  # X509_V_ERR_* codes
    **dict.fromkeys((9, 10), CERTIFICATE_EXPIRED),
    **dict.fromkeys((62, 63, 64), CERTIFICATE_OTHER_HOST),
}

# (pattern, operator's message, lines it takes): the first refusal whose pattern is found in as
# many lines is named. Order matters: a TLS client on a plaintext listener fails its handshake.
_REFUSALS = (
    (
        re.compile(r"SASL .*(failed|authentication)", re.I),
        f"{SASL_REFUSED} (CHRONOS_KAFKA__SASL_MECHANISMS, "
        "CHRONOS_KAFKA__SASL_USERNAME, CHRONOS_KAFKA__SASL_PASSWORD)",
        1,
    ),
    (
        # TLS 1.3: the server checks the client's certificate after the handshake, and answers
        # the first request with an alert: which one depends on the broker's JDK (17.0.15 says
        # "bad certificate", 17.0.21 "certificate required"), or "unknown CA".
        re.compile(r"alert (certificate required|unknown ca|bad certificate)", re.I),
        f"{CLIENT_CERTIFICATE_REFUSED} (CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION, "
        "CHRONOS_KAFKA__SSL_KEY_LOCATION)",
        1,
    ),
    (
        # A TLS client on a plaintext listener: librdkafka asks.
        re.compile(r"connecting to a PLAINTEXT broker listener", re.I),
        f"{PROTOCOL_MISMATCH} (CHRONOS_KAFKA__SECURITY_PROTOCOL)",
        1,
    ),
    (
        re.compile(r"SSL handshake failed|certificate verify failed|ssl\.\w+\.location", re.I),
        f"{TLS_HANDSHAKE_FAILED} (CHRONOS_KAFKA__SECURITY_PROTOCOL, "
        "CHRONOS_KAFKA__SSL_CA_LOCATION or CHRONOS_KAFKA__SSL_CA_PEM, "
        "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION, CHRONOS_KAFKA__SSL_KEY_LOCATION)",
        1,
    ),
    (
        # A plaintext client on a TLS or SASL listener: the broker closes the connection at its
        # first request. librdkafka before 2.x said "incorrect security.protocol"; later ones
        # say only that (an INFO line), so it takes two connections closed alike, not one a
        # broker shutting down may have closed.
        re.compile(
            r"incorrect security\.protocol"
            r"|Disconnected: connection closed by peer.* in state APIVERSION_QUERY",
            re.I,
        ),
        f"{PROTOCOL_MISMATCH} (CHRONOS_KAFKA__SECURITY_PROTOCOL)",
        2,
    ),
)
STARTUP_LOG = logging.getLogger("chronos.librdkafka.startup")
# The start-up client's INFO lines reach the refusal parser (a connection closed at its first
# request is one); they are shown only at the level librdkafka's lines are (_ShownAsLibrdkafka).
STARTUP_LOG.setLevel(logging.INFO)


class _ShownAsLibrdkafka(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return logging.getLogger("chronos.librdkafka").isEnabledFor(record.levelno)


STARTUP_LOG.addFilter(_ShownAsLibrdkafka())
STARTUP_LOG.addFilter(ThrottleFilter())


class _Collector(logging.Filter):
    """Every line of the start-up client, for ``refusal``: a filter placed first, so it reads
    them all, whatever the level shown and before the throttle (which lets one FAIL line a
    minute through: a refusal after a first "connection refused" would wait for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.lines.append(record.getMessage())
        return True


def tls_reason(config: dict[str, Any], timeout: float = 5.0) -> str | None:
    """Why the first bootstrap server's certificate is not trusted: one of the CERTIFICATE_*
    reasons, then OpenSSL's words ("certificate has expired", "Hostname mismatch ..."):
    librdkafka says only "certificate verify failed". One handshake with the client's CAs, as
    librdkafka verifies (host name included); None if it succeeds, the server cannot be
    reached or the CAs cannot be read."""
    server = str(config.get("bootstrap.servers", "")).split(",")[0].strip()
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        context = trust(config)
        if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
            context.check_hostname = False
        with (
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host.strip("[]")),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        why = _CERTIFICATE_REASONS.get(exc.verify_code, CERTIFICATE_INVALID)
        return f"{why}: {exc.verify_message}"
    except (OSError, ValueError):
        return None


def trust(config: dict[str, Any]) -> ssl.SSLContext:
    """A client context trusting the CAs librdkafka would: ``ssl.ca.pem`` (PEM text), else
    ``ssl.ca.location`` (a file, a directory of hashed certificates, or ``probe``: the system's
    store), else the system's store. OSError or ssl.SSLError if they cannot be read."""
    pem = str(config.get("ssl.ca.pem") or "")
    location = str(config.get("ssl.ca.location") or "")
    if pem:
        return ssl.create_default_context(cadata=pem)
    if not location or location == "probe":
        return ssl.create_default_context()
    if os.path.isdir(location):
        return ssl.create_default_context(capath=location)
    return ssl.create_default_context(cafile=location)


def refusal(lines: list[str]) -> str | None:
    """The security refusal among librdkafka's log lines, as an operator's message."""
    for pattern, what, times in _REFUSALS:
        found = [line for line in lines if pattern.search(line)]
        if len(found) >= times:
            return f"{what}: {found[0].split(': ', 1)[-1][:300]}"
    return None


def reach_broker(settings: Settings, timeout: float = 15.0) -> tuple[AdminClient, Any]:
    """An admin client and the cluster's metadata. ConfigError naming the setting (and
    OpenSSL's reason) if the broker refuses the client's TLS or SASL settings;
    BrokerUnreachableError if it does not answer within ``timeout``."""
    collector = _Collector()
    STARTUP_LOG.filters.insert(0, collector)
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
        STARTUP_LOG.removeFilter(collector)


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
    partitions = len(metadata.topics[settings.input_topic].partitions)
    _, shard_map = layout(settings.database_url.reveal(), settings.shard_map)
    uncovered = shard_map.uncovered(partitions)
    if uncovered:
        raise ConfigError(
            f"CHRONOS_SHARD_MAP / --shard-map ({shard_map.spec}) gives no shard to partition "
            f"{uncovered[0]} of the input topic {settings.input_topic!r} ({partitions} "
            "partitions): give every partition a shard"
        )
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
