"""Kafka client defaults that make fewer, larger requests (a broker's cost is per request), with
the firing producer kept prompt, and every one of them overridable by a pass-through property."""

from __future__ import annotations

from chronos.kafka import consumer_config, producer_config
from tests.unit.helpers import settings


def test_producers_batch_and_the_firing_one_waits_least() -> None:
    firing = producer_config(settings(), "firing")
    intake = producer_config(settings(), "intake")
    assert 0 < firing["linger.ms"] <= 2  # it adds to every fired record's lateness
    assert intake["linger.ms"] > firing["linger.ms"]
    for conf in (firing, intake):
        assert conf["batch.num.messages"] >= 10_000 and conf["batch.size"] >= 1_000_000


def test_the_consumer_never_waits_for_more_bytes_than_a_record() -> None:
    conf = consumer_config(settings())
    assert conf.get("fetch.min.bytes", 1) == 1  # a short delay's record is fetched at once
    assert conf["fetch.wait.max.ms"] <= 100  # short delays depend on prompt fetches


def test_request_size_defaults_are_overridable() -> None:
    s = settings(
        producer_properties={"linger.ms": "0", "batch.size": "16384"},
        consumer_properties={"fetch.min.bytes": "1", "fetch.wait.max.ms": "10"},
    )
    assert producer_config(s, "firing")["linger.ms"] == "0"
    assert producer_config(s, "intake")["batch.size"] == "16384"
    conf = consumer_config(s)
    assert (conf["fetch.min.bytes"], conf["fetch.wait.max.ms"]) == ("1", "10")


def test_the_consumer_prefetches_a_few_batches_not_librdkafkas_64_mib() -> None:
    conf = consumer_config(settings(consume_batch_size=2000))
    assert conf["queued.min.messages"] == 10_000  # five consumed batches per partition
    assert conf["queued.max.messages.kbytes"] == 16 * 1024
    wider = consumer_config(settings(consumer_properties={"queued.max.messages.kbytes": "65536"}))
    assert wider["queued.max.messages.kbytes"] == "65536"


def test_a_topic_the_broker_does_not_know_fails_before_the_delivery_timeout() -> None:
    # A record for a missing topic must fail as unknown (permanent: dead-lettered after the
    # attempts), not time out (transient: retried for ever).
    for delivery_timeout_ms in (1000, 3000):
        conf = producer_config(settings(delivery_timeout_ms=delivery_timeout_ms), "firing")
        assert 0 < conf["topic.metadata.propagation.max.ms"] < delivery_timeout_ms
    overridden = settings(producer_properties={"topic.metadata.propagation.max.ms": "500"})
    assert producer_config(overridden, "firing")["topic.metadata.propagation.max.ms"] == "500"
