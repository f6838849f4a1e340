"""Consumer-group defaults: a dead node's input moves within the session (20 s, against
librdkafka's 45 s), a session that outlasts the group coordinator's move when a broker dies at
Kafka's default fencing (9 s, and the election when it was the controller too)."""

from __future__ import annotations

import pytest

from chronos.config.settings import load
from chronos.errors import ConfigError
from chronos.kafka import consumer_config
from tests.unit.helpers import settings


def test_defaults_outlast_a_brokers_fencing_and_move_a_dead_nodes_partitions_in_seconds() -> None:
    conf = consumer_config(settings())
    assert 9000 + 5000 <= conf["session.timeout.ms"] <= 20000
    assert conf["heartbeat.interval.ms"] * 3 <= conf["session.timeout.ms"]
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert "group.instance.id" not in conf
    assert "group.protocol" not in conf
    # While the coordinator is down librdkafka asks for the new one every tenth of this: well
    # within the session (it waited a minute by default, and the session ended first).
    assert conf["coordinator.query.interval.ms"] / 10 <= 1000


def test_every_default_can_be_overridden_by_a_pass_through_property() -> None:
    conf = consumer_config(
        settings(
            consumer_properties={
                "session.timeout.ms": "45000",
                "partition.assignment.strategy": "range",
            }
        )
    )
    assert conf["session.timeout.ms"] == "45000"
    assert conf["partition.assignment.strategy"] == "range"


def test_static_membership_from_a_setting() -> None:
    conf = consumer_config(settings(group_instance_id="chronos-0"))
    assert conf["group.instance.id"] == "chronos-0"


def test_the_broker_driven_protocol_leaves_timeouts_and_assignment_to_the_broker() -> None:
    conf = consumer_config(settings(group_protocol="consumer"))
    assert conf["group.protocol"] == "consumer"
    for owned_by_the_broker in (
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "partition.assignment.strategy",
    ):
        assert owned_by_the_broker not in conf


def test_group_settings_come_from_the_environment() -> None:
    loaded = load(
        environ={
            "CHRONOS_DATABASE_URL": "postgresql://x@127.0.0.1:1/x",
            "CHRONOS_GROUP_INSTANCE_ID": "pod-1",
            "CHRONOS_GROUP_PROTOCOL": "CONSUMER",
        }
    )
    assert (loaded.group_instance_id, loaded.group_protocol) == ("pod-1", "consumer")


@pytest.mark.parametrize(
    ("source", "prop"),
    [
        ("consumer_properties", "session.timeout.ms"),
        ("consumer_properties", "heartbeat.interval.ms"),
        ("kafka_properties", "partition.assignment.strategy"),
    ],
)
def test_a_classic_group_property_with_the_broker_driven_protocol_is_refused_by_name(
    source: str, prop: str
) -> None:
    # librdkafka refuses to create such a consumer ("... is not supported for
    # group.protocol=consumer"): the node would fail after start-up instead of at the check.
    with pytest.raises(ConfigError, match=r"CHRONOS_GROUP_PROTOCOL") as raised:
        settings(group_protocol="consumer", **{source: {prop: "6000"}})
    assert prop.upper().replace(".", "_") in str(raised.value)


def test_a_classic_group_property_is_taken_with_the_classic_protocol() -> None:
    conf = consumer_config(settings(consumer_properties={"heartbeat.interval.ms": "1000"}))
    assert conf["heartbeat.interval.ms"] == "1000"


def test_every_client_looks_for_new_leaders_twice_a_second() -> None:
    """A broker killed outright stays its partitions' leader in the metadata until the
    controller fences it: the clients look again within half a second, not five minutes."""
    from chronos.kafka import producer_config

    config = settings()
    for conf in (consumer_config(config), producer_config(config, "firing")):
        assert conf["topic.metadata.refresh.interval.ms"] == 500
