"""The pure parts of the embedded development stack."""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from pathlib import Path

import pytest

from chronos import embedded
from chronos.config import settings
from chronos.config.validation import validate
from chronos.embedded import dev, process
from chronos.errors import ConfigError, PortInUse
from tests.support.databases import with_database


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    dev.add_dev_arguments(parser)
    settings.add_arguments(parser)  # as the CLI does: the two sets of flags must not clash
    return parser


def test_dev_defaults() -> None:
    args = _parser().parse_args([])

    assert (args.nodes, args.kafka_port, args.pg_port) == (2, 9092, 55432)
    assert (args.partitions, args.http_port_base) == (6, 8080)
    assert args.data_dir == Path(".chronos/dev")


def test_dev_flags_and_settings_flags_parse_together() -> None:
    args = _parser().parse_args(["--nodes", "0", "--input-topic", "in", "--http-port-base", "9000"])

    assert args.nodes == 0 and args.http_port_base == 9000
    assert settings.load(args, environ={}).input_topic == "in"


def test_node_settings_give_each_node_its_port_id_and_the_stack() -> None:
    base = settings.load(environ={})

    nodes = [dev.node_settings(base, "postgresql://u@h:1/d", "h:2", i, 8080) for i in range(2)]

    assert [n.http_port for n in nodes] == [8080, 8081]
    assert len({n.node_id for n in nodes}) == 2
    assert all(uuid.UUID(n.node_id) for n in nodes)
    assert all(n.kafka_bootstrap_servers == "h:2" for n in nodes)
    assert nodes[0].database_url.reveal() == "postgresql://u@h:1/d"
    env = settings.as_environment(nodes[0])
    # The consumer session is Chronos's own default (one that outlasts a broker's death at
    # Kafka's default fencing), not a shorter one of the development stack's.
    assert "CHRONOS_CONSUMER__SESSION_TIMEOUT_MS" not in env
    assert env["CHRONOS_HTTP_PORT"] == "8080"


def test_node_settings_keep_a_session_timeout_the_user_chose() -> None:
    base = settings.load(environ={"CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "10000"})

    node = dev.node_settings(base, "postgresql://u@h:1/d", "h:2", 0, 8080)

    assert node.consumer_properties["session.timeout.ms"] == "10000"


def test_node_settings_leave_the_session_to_the_broker_with_its_protocol() -> None:
    # With CHRONOS_GROUP_PROTOCOL=consumer the broker owns the session timeout: librdkafka
    # refuses a consumer given session.timeout.ms, so a dev node would not start.
    base = settings.load(environ={"CHRONOS_GROUP_PROTOCOL": "consumer"})

    node = dev.node_settings(base, "postgresql://u@h:1/d", "h:2", 0, 8080)

    assert "session.timeout.ms" not in node.consumer_properties
    validate(node)


def test_default_node_command_runs_chronos() -> None:
    assert dev.NODE_COMMAND[1:] == ("-m", "chronos", "run")


def test_free_port_is_bindable() -> None:
    port = embedded.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_free_ports_are_a_block_outside_the_ephemeral_range() -> None:
    """A port of the kernel's ephemeral range can become an outgoing connection's local end
    while its server is down (a killed broker), and the server cannot bind it again."""
    low, high = process._ephemeral_range()
    bases = [embedded.free_ports(3) for _ in range(50)]
    for base in bases:
        assert all(not low <= port <= high for port in range(base, base + 3))
        for port in range(base, base + 3):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))
    handed = [port for base in bases for port in range(base, base + 3)]
    assert len(set(handed)) == len(handed), "a port handed out twice"


def test_port_free_sees_a_listener_and_a_connection_not_a_closed_port() -> None:
    port, other = embedded.free_port(), embedded.free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert not process.port_free(port)
    assert process.port_free(port)
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", other))
        server.listen()
        client.bind(("127.0.0.1", port))  # what the kernel does with an ephemeral port
        client.connect(("127.0.0.1", other))
        assert not process.port_free(port)


def test_a_held_port_stops_the_kafka_node_before_its_jvm_starts(tmp_path: Path) -> None:
    port = embedded.free_port()
    node = embedded.EmbeddedKafka(port, log_dir=tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port}") as raised:
            node.spawn()
    assert raised.value.port == port
    assert not node.running


@pytest.mark.parametrize(
    ("port", "hint"),
    [
        (5432, "; choose another --pg-port"),
        (9092, "; choose another --kafka-port"),
        (9094, ""),
        (12345, ""),
    ],
)
def test_port_hint_names_the_option(port: int, hint: str) -> None:
    args = argparse.Namespace(pg_port=5432, kafka_port=9092, brokers=1, shards=1)
    assert dev._port_hint(args, PortInUse("taken", port)) == hint
    args.brokers = 3
    cluster_hint = dev._port_hint(args, PortInUse("taken", port))
    if port == 9094:
        assert cluster_hint.startswith("; choose another --kafka-port (broker i")
    assert dev._port_hint(args, ConfigError("no java")) == ""


def test_port_hint_names_the_pg_port_of_a_shards_server() -> None:
    args = argparse.Namespace(pg_port=5432, kafka_port=9092, brokers=1, shards=3)
    hint = dev._port_hint(args, PortInUse("taken", 5434))
    assert hint == "; choose another --pg-port (shard i's Postgres listens on it + i)"
    assert dev._port_hint(args, PortInUse("taken", 5435)) == ""


def test_alive() -> None:
    assert process._alive(os.getpid())
    assert not process._alive(2**22 + 1)  # above the kernel's pid_max ceiling


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://postgres@127.0.0.1:5/postgres", "postgresql://postgres@127.0.0.1:5/x"),
        ("postgresql://u:p@h:5/test?sslmode=disable", "postgresql://u:p@h:5/x?sslmode=disable"),
    ],
)
def test_with_database(url: str, expected: str) -> None:
    assert with_database(url, "x") == expected


def test_node_settings_relay_the_scheduled_instant_for_tail() -> None:
    """chronos tail shows each record's lateness in the quick start: dev's nodes relay the
    instant under chronosScheduledFor unless a relay header was chosen."""
    url = "postgresql://u@h:1/d"
    node = dev.node_settings(settings.load(environ={}), url, "h:2", 0, 8080)
    assert node.relay_deadline_header == "chronosScheduledFor"
    assert node.relay_id_header == ""
    validate(node)
    chosen = settings.load(environ={"CHRONOS_RELAY_DEADLINE_HEADER": "firedFor"})
    assert dev.node_settings(chosen, url, "h:2", 0, 8080).relay_deadline_header == "firedFor"
    with_id = settings.load(environ={"CHRONOS_RELAY_ID_HEADER": "mid"})
    assert dev.node_settings(with_id, url, "h:2", 0, 8080).relay_deadline_header == ""


def test_node_settings_on_tansu_shorten_the_session_unless_the_user_chose_one() -> None:
    """tansu makes a join wait half the session: 10 s at Chronos's 20 s; one broker, no death to
    outlast, so its nodes get the short one."""
    base = settings.load(environ={})

    node = dev.node_settings(base, "postgresql://u@h:1/d", "h:2", 0, 8080, broker="tansu")
    chosen = dev.node_settings(
        settings.load(environ={"CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "10000"}),
        "postgresql://u@h:1/d",
        "h:2",
        0,
        8080,
        broker="tansu",
    )

    assert node.consumer_properties["session.timeout.ms"] == dev.TANSU_SESSION_TIMEOUT_MS
    assert chosen.consumer_properties["session.timeout.ms"] == "10000"
