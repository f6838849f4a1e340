"""Start-up refuses topics this node may not use, where the broker reports permissions
(``chronos.kafka.check_access``); brokers that do not report them are not judged."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation

from chronos.errors import TopicMissingError
from chronos.kafka import check_access, missing_operation
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT, settings

R, W, D, ALL = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.ALL


class Admin:
    def __init__(self, allowed: dict[str, list[Any] | None]):
        self.allowed = allowed

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        for name in topics.topic_names:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(authorized_operations=self.allowed[name]))
            out[name] = future
        return out


def test_missing_operation_only_when_reported() -> None:
    assert not missing_operation(None, W)
    assert not missing_operation([], W)
    assert not missing_operation([D, W], W)
    assert not missing_operation([ALL], W)
    assert missing_operation([D, R], W)


def test_a_dead_letter_topic_without_write_access_stops_start_up_naming_the_setting() -> None:
    admin = Admin({INPUT: [D, R], OUTPUT: [D, W], DEAD_LETTER: [D, R]})
    with pytest.raises(TopicMissingError, match=r"CHRONOS_DEAD_LETTER_TOPIC.*may not WRITE"):
        check_access(admin, settings(), 1.0)  # type: ignore[arg-type]


def test_an_input_topic_without_read_access_stops_start_up() -> None:
    admin = Admin({INPUT: [D], OUTPUT: [D, W], DEAD_LETTER: [D, W]})
    with pytest.raises(TopicMissingError, match=r"CHRONOS_INPUT_TOPIC.*may not READ"):
        check_access(admin, settings(), 1.0)  # type: ignore[arg-type]


def test_full_access_or_no_report_starts() -> None:
    check_access(Admin({INPUT: [D, R], OUTPUT: [W], DEAD_LETTER: [ALL]}), settings(), 1.0)  # type: ignore[arg-type]
    check_access(Admin({INPUT: None, OUTPUT: None, DEAD_LETTER: None}), settings(), 1.0)  # type: ignore[arg-type]


def test_librdkafka_s_security_refusals_name_the_settings() -> None:
    from chronos.kafka.startup import refusal

    sasl = (
        "FAIL [rdkafka#producer-3] [thrd:sasl_plaintext://b:9092/bootstrap]: sasl_plaintext://"
        "b:9092/bootstrap: SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL"
    )
    tls = "FAIL [rdkafka#producer-1] [thrd:ssl://b:9093/bootstrap]: ssl://b:9093/bootstrap: SSL "
    tls += "handshake failed: error:0A000086:SSL routines::certificate verify failed"
    assert "CHRONOS_KAFKA__SASL_MECHANISMS" in (refusal(["other", sasl]) or "")
    assert "CHRONOS_KAFKA__SSL_CA_LOCATION" in (refusal([tls]) or "")
    assert refusal(["FAIL [x]: Connect to ipv4#127.0.0.1:1 failed: Connection refused"]) is None


def test_a_refused_client_certificate_is_named_whichever_alert_the_broker_s_jdk_sends() -> None:
    """JDK 17.0.15's broker alerts "bad certificate", 17.0.21's "certificate required": both are
    the missing or refused client certificate, named by its setting."""
    from chronos.kafka.startup import CLIENT_CERTIFICATE_REFUSED, refusal

    for alert in ("bad certificate", "certificate required", "unknown ca"):
        line = (
            "FAIL [rdkafka#producer-1] [thrd:ssl://b:9093/bootstrap]: ssl://b:9093/bootstrap: "
            f"SSL transport error: error:0A00045C:SSL routines::tlsv13 alert {alert}"
        )
        said = refusal([line]) or ""
        assert said.startswith(CLIENT_CERTIFICATE_REFUSED), said
        assert "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION" in said, said


def test_a_connection_closed_at_its_first_request_twice_is_a_protocol_mismatch() -> None:
    """librdkafka 2.x says only that the broker closed the connection during ApiVersion (what a
    TLS listener does to a plaintext client): twice is the configured protocol, once may be a
    broker shutting down."""
    from chronos.kafka.startup import PROTOCOL_MISMATCH, refusal

    line = (
        "FAIL [rdkafka#producer-3] [thrd:b:9093/bootstrap]: b:9093/bootstrap: Disconnected: "
        "connection closed by peer: receive 0 after POLLIN (after 6ms in state APIVERSION_QUERY)"
    )
    assert refusal([line]) is None
    said = refusal([line, line.replace("6ms", "3ms")]) or ""
    assert said.startswith(PROTOCOL_MISMATCH), said
    assert "CHRONOS_KAFKA__SECURITY_PROTOCOL" in said, said


def test_start_up_reads_a_refusal_that_follows_a_refused_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start-up client's log is throttled (one FAIL line a minute is shown): the refusal
    parser still reads every line, so a TLS refusal after a first "connection refused" (the
    broker was still starting) is named at once, not once the throttle lets a FAIL through."""
    import logging

    from confluent_kafka import KafkaException

    from chronos.errors import ConfigError
    from chronos.kafka import startup

    lines = [
        "FAIL [rdkafka#producer-1] [thrd:b:9093/bootstrap]: b:9093/bootstrap: Connect to "
        "ipv4#127.0.0.1:9093 failed: Connection refused (after 0ms in state CONNECT)",
        "FAIL [rdkafka#producer-1] [thrd:ssl://b:9093/bootstrap]: ssl://b:9093/bootstrap: SSL "
        "handshake failed: error:0A000086:SSL routines::certificate verify failed",
    ]

    class Admin:
        def __init__(self, config: dict[str, Any]) -> None:
            self.log: logging.Logger = config["logger"]

        def list_topics(self, timeout: float) -> None:
            raise KafkaException("no metadata")

        def poll(self, timeout: float) -> None:
            if lines:
                self.log.error(lines.pop(0))

    monkeypatch.setattr(startup, "AdminClient", Admin)
    monkeypatch.setattr(startup, "tls_reason", lambda config: None)
    with pytest.raises(ConfigError) as raised:
        startup.reach_broker(settings(), timeout=5.0)
    assert str(raised.value).startswith(startup.TLS_HANDSHAKE_FAILED), raised.value
