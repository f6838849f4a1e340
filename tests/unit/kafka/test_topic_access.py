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
