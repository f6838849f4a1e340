"""The benchmark's own stack: embedded Postgres and broker, node and relay processes (started,
watched and stopped by ``chronos.embedded.launcher``, like ``chronos dev``'s and the tests')."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chronos.embedded import launcher
from loadtest.bench.results.load import Preload

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 90.0
MB = 1024 * 1024
TEST_HOOK_PREFIXES = ("CHRONOS_TEST_", "CHRONOS_DEV_", "CHRONOS_FAULT_")
BROKER_SETTINGS = {"log.segment.delete.delay.ms": "1000", "log.initial.task.delay.ms": "1000"}
"""The bench's broker removes a deleted topic's partitions from the disk a second later (Kafka
waits a minute; with 0 its deletion task reschedules itself at once, for ever): a scenario's
topics are gone before the next scenario starts, not during it. Its log tasks (that deletion
among them) first run a second after it started, not Kafka's 30 s (a setting Kafka documents
for tests: the bench's broker is one)."""
CLEAR_TIMEOUT_S = 120.0
TOPIC_PREFIX = "bench-"  # every topic (and group) of a scenario; clear_broker deletes these


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return launcher.child_environment(extra)


def launch(
    args: Sequence[str],
    *,
    log_path: Path,
    env: dict[str, str],
    death_signal: signal.Signals = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """``python <args>`` from the repository root, output to ``log_path``; it gets
    ``death_signal`` if the benchmark dies."""
    return launcher.launch(
        log_path.stem,
        [sys.executable, *args],
        env=env,
        log_path=log_path,
        cwd=REPO,
        death_signal=death_signal,
        new_session=False,
    ).process


def _partition_dirs(log_dirs: Path, topics: Sequence[str]) -> list[str]:
    """The partition directories of ``topics`` still in ``log_dirs`` (``<topic>-<n>``, or
    ``<topic>-<n>.<id>-delete`` once deleted and not yet removed)."""
    try:
        entries = [p.name for p in log_dirs.iterdir() if p.is_dir()]
    except OSError:
        return []
    prefixes = tuple(f"{t}-" for t in topics)
    return [name for name in entries if name.startswith(prefixes)]


def read_text(path: str) -> str | None:
    """A file's text, None if it cannot be read (not there yet)."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


@dataclass
class NodeProcess:
    """One ``python -m chronos run`` process (or the echo relay, which has no HTTP server)."""

    index: int
    settings: Any  # chronos.config.settings.Settings
    launched: launcher.Launched

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.launched.process

    @property
    def log_path(self) -> Path:
        assert self.launched.log_path is not None
        return self.launched.log_path

    @property
    def pid(self) -> int:
        return self.launched.pid

    @property
    def port(self) -> int:
        return self.launched.http_port

    def alive(self) -> bool:
        return self.launched.alive()

    def ready(self) -> bool:
        return self.launched.ready(2.0)

    def metrics_text(self) -> str:
        try:
            return self.launched.metrics_text()
        except (urllib.error.URLError, OSError, ValueError):
            return ""

    def assignment(self, topic: str) -> set[int]:
        """Partitions of ``topic`` the node holds now, from its ``/metrics``."""
        try:
            return {p for t, p in self.launched.assignment() if t == topic}
        except (urllib.error.URLError, OSError, ValueError):
            return set()

    def stop(self, timeout: float) -> int | None:
        return self.launched.stop(timeout)


@dataclass(frozen=True)
class Topics:
    input: str
    output: str
    dead_letter: str
    group: str

    def all(self) -> list[str]:
        return [self.input, self.output, self.dead_letter]


SAMPLE_SQL = """
SELECT
  (SELECT count(*) FROM chronos_messages
    WHERE readied_at IS NULL AND deadline < now() + interval '1 day') AS waiting,
  (SELECT count(*) FROM chronos_messages WHERE readied_at IS NOT NULL) AS claimed,
  (SELECT count(*) FROM chronos_messages WHERE readied_at IS NULL AND deadline < now()) AS overdue,
  (SELECT extract(epoch FROM now() - min(deadline))::float8 FROM chronos_messages
    WHERE readied_at IS NULL AND deadline < now()) AS oldest_overdue_s
"""
"""What the sampler reads every second. Pre-loaded rows (days ahead) are never counted: the
partial ``due`` index range stops at ``now() + 1 day``."""

PRELOAD_SQL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers)
SELECT 'preload-' || g,
       now() + interval '7 days' + g * interval '1 millisecond',
       convert_to('key-' || (g %% 1000), 'UTF8'),
       %(value)s::bytea,
       '[{"trace": "MQ=="}]'::jsonb
FROM generate_series(1::bigint, %(rows)s::bigint) AS g
"""
"""Far-future rows (7 days ahead, one per millisecond after that): they never fire."""


POSTGRES_SETTINGS = {"shared_buffers": "1GB", "max_wal_size": "8GB"}
"""The benchmark's Postgres is set up as docs/sizing.md tells a production server to be:
``shared_buffers`` holding the rows coming due, ``max_wal_size`` holding a burst's WAL (a
1,000,000-message burst writes about 1.7 GB), so the figures are Chronos's cost, not that of a
server left at its defaults (128 MB, 1 GB: checkpoints forced in the middle of a burst and
full-page images after each). ``--postgres-setting`` overrides them (the defaults back:
``shared_buffers=128MB``, ``max_wal_size=1GB``)."""


class Stack:
    """Embedded Postgres and broker on free ports, plus the node processes of one scenario."""

    def __init__(
        self,
        data_dir: Path,
        logs_dir: Path,
        partitions: int,
        node_env: dict[str, str],
        postgres_settings: dict[str, str] | None = None,
        shards: int = 1,
    ) -> None:
        self.data_dir = data_dir
        self.shards = shards  # Postgres servers, one per shard (docs/shards.md)
        self.logs_dir = logs_dir
        self.partitions = partitions
        self.node_env = node_env
        self.postgres_settings = (
            dict(POSTGRES_SETTINGS) if postgres_settings is None else postgres_settings
        )
        self.postgres: Any = None  # shard 0's
        self.shard_servers: list[Any] = []  # the other shards'
        self.broker: Any = None
        self.url = ""  # shard 0's
        self.urls: list[str] = []  # every shard's, shard 0 first
        self.bootstrap = ""
        self.nodes: list[NodeProcess] = []

    def start(self) -> None:
        from chronos.config.shards import ShardMap
        from chronos.embedded import EmbeddedKafka, EmbeddedPostgres
        from chronos.store import migrate
        from loadtest.bench.pgstats import alter_system

        self.postgres = EmbeddedPostgres(self.data_dir / "postgres", 0, durable=True)
        self.shard_servers = [
            EmbeddedPostgres(self.data_dir / f"postgres-shard{i}", 0, durable=True)
            for i in range(1, self.shards)
        ]
        # pg_stat_statements: each load's Postgres split by statement (loadtest.bench.pgstats).
        server = {"shared_preload_libraries": "pg_stat_statements", **self.postgres_settings}
        for postgres in self.servers:
            alter_system(postgres.start(), server)
            url = postgres.restart()
            self.urls.append(url)
            _sql(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        self.url = self.urls[0]
        self.broker = EmbeddedKafka(0, log_dir=self.logs_dir)
        self.broker.extra = dict(BROKER_SETTINGS)
        self.bootstrap = self.broker.start()
        for shard, url in enumerate(self.urls):
            migrate.upgrade_shard(url, shard, ShardMap(self.shards))

    @property
    def servers(self) -> list[Any]:
        """Every shard's Postgres server, shard 0's first."""
        return [self.postgres, *self.shard_servers]

    @property
    def database_url(self) -> str:
        """The nodes' CHRONOS_DATABASE_URL: every shard's, shard 0 first."""
        return " ".join(self.urls)

    @property
    def postgres_pids(self) -> list[int | None]:
        return [None if p is None else p.pid for p in self.servers]

    def sql_each(self, statement: str, params: dict[str, Any] | None = None) -> list[list[Any]]:
        """``statement``'s rows in every shard, shard 0's first."""
        return [_sql(url, statement, params) for url in self.urls]

    def shard_sqls(self) -> list[Any]:
        """A ``sql(statement)`` of each shard (``loadtest.bench.pgstats.snapshot_shards``)."""
        return [lambda statement, url=url: _sql(url, statement) for url in self.urls]

    @property
    def postgres_pid(self) -> int | None:
        return None if self.postgres is None else self.postgres.pid

    @property
    def broker_pid(self) -> int | None:
        return None if self.broker is None else self.broker.pid

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        """``statement`` on shard 0's Postgres (the only one without ``--shards``)."""
        return _sql(self.url, statement, params)

    def postgres_version(self) -> str | None:
        try:
            return str(self.sql("SHOW server_version")[0][0])
        except Exception:  # noqa: BLE001 - a fact for the report, nothing more
            return None

    @property
    def audit_topic(self) -> str | None:
        """The topic the nodes write their audit trail to (``--node-env CHRONOS_AUDIT_TOPIC``)."""
        return self.node_env.get("CHRONOS_AUDIT_TOPIC") or None

    def topics(self, name: str, config: dict[str, str] | None = None) -> Topics:
        """The topics of scenario ``name`` (created with topic ``config`` when new)."""
        from chronos.embedded import create_topics

        topics = Topics(
            f"{TOPIC_PREFIX}{name}-input",
            f"{TOPIC_PREFIX}{name}-output",
            f"{TOPIC_PREFIX}{name}-dead-letter",
            f"{TOPIC_PREFIX}{name}",
        )
        wanted = {t: self.partitions for t in topics.all()}
        audit = self.audit_topic
        if audit:  # the nodes write their audit trail there (--node-env CHRONOS_AUDIT_TOPIC=...)
            wanted[audit] = self.partitions
        create_topics(self.bootstrap, wanted, config=config)
        return topics

    def clear_broker(self, timeout: float = CLEAR_TIMEOUT_S) -> None:
        """Delete every topic the scenarios before made (``TOPIC_PREFIX``, and the nodes' audit
        topic if they have one) and wait until the broker has removed their partitions from the
        disk: the next scenario runs on the same warm broker (see ``loadtest.bench.warmup``)
        with none of the records, topics or housekeeping of the one before."""
        from chronos.embedded.topics import admin_client

        admin = admin_client(self.bootstrap)
        names = [
            t
            for t in admin.list_topics(timeout=30).topics
            if t.startswith(TOPIC_PREFIX) or t == self.audit_topic
        ]
        if names:
            futures = admin.delete_topics(names, operation_timeout=timeout)
            for future in futures.values():
                future.result(timeout)
        log_dirs = self.broker.config().log_dirs
        limit = time.monotonic() + timeout
        while True:
            known = set(admin.list_topics(timeout=30).topics)
            left = [t for t in names if t in known] + _partition_dirs(log_dirs, names)
            if not left:
                return
            if time.monotonic() > limit:
                raise RuntimeError(f"the broker still holds {left[:3]} after {timeout:g} s")
            time.sleep(0.2)

    def reset_table(self) -> None:
        self.sql_each("TRUNCATE chronos_messages")
        self.sql_each("DELETE FROM chronos_nodes")

    def preload(self, rows: int, payload_bytes: int = 100) -> Preload:
        """``rows`` far-future rows, shared between the shards."""
        started = time.monotonic()
        share = -(-rows // self.shards)
        self.sql_each(PRELOAD_SQL, {"rows": share, "value": b"p" * payload_bytes})
        inserted = time.monotonic() - started
        self.sql_each("VACUUM (ANALYZE) chronos_messages")
        self.sql_each("CHECKPOINT")
        size = sum(
            r[0][0] for r in self.sql_each("SELECT pg_total_relation_size('chronos_messages')")
        )
        return Preload(
            rows=rows,
            insert_s=round(inserted, 1),
            seconds=round(time.monotonic() - started, 1),
            table_mb=round(int(size) / MB, 1),
        )

    def node_settings(self, topics: Topics) -> Any:
        from chronos.config import settings as chronos_settings

        return chronos_settings.load(
            None,
            environ=dict(self.node_env),
            input_topic=topics.input,
            output_topic=topics.output,
            dead_letter_topic=topics.dead_letter,
            consumer_group=topics.group,
            http_host="127.0.0.1",
            log_format="json",
        )

    def start_nodes(self, count: int, topics: Topics, log_dir: Path) -> list[NodeProcess]:
        from chronos.config import settings as chronos_settings
        from chronos.embedded import free_port
        from chronos.embedded.dev import node_settings

        base = self.node_settings(topics)
        for index in range(count):
            # node_settings gives node `index` the port base + index and a fresh node id.
            port = free_port()
            settings = node_settings(base, self.database_url, self.bootstrap, index, port - index)
            env = clean_env(chronos_settings.as_environment(settings))
            # Test hooks (CHRONOS_TEST_INJECT, ...) are not settings: passed on as they are.
            env.update({k: v for k, v in self.node_env.items() if k.startswith(TEST_HOOK_PREFIXES)})
            node = launcher.launch(
                f"node {index}", launcher.NODE_COMMAND, env=env, http_port=settings.http_port,
                log_path=log_dir / f"node-{index}.log", cwd=REPO, new_session=False,
            )  # fmt: skip
            self.nodes.append(NodeProcess(index, settings, node))
        return list(self.nodes)

    def start_relay(self, topics: Topics, log_dir: Path, timeout: float = 60.0) -> NodeProcess:
        """The harness's echo relay in place of a node (no HTTP server, no database)."""
        import types

        settings = types.SimpleNamespace(http_port=0, timing_advance_ms=50)
        argv = ["-m", "loadtest", "relay", "--bootstrap", self.bootstrap,
                "--input-topic", topics.input, "--output-topic", topics.output,
                "--dead-letter-topic", topics.dead_letter,
                "--timing-advance-ms", str(settings.timing_advance_ms)]  # fmt: skip
        log_path = log_dir / "relay.log"
        relay = launcher.launch(
            "relay", [sys.executable, *argv], env=clean_env(), log_path=log_path, cwd=REPO,
            new_session=False,
        )  # fmt: skip
        node = NodeProcess(0, settings, relay)
        self.nodes.append(node)
        limit = time.monotonic() + timeout
        while "relay running" not in (read_text(str(log_path)) or ""):
            if not node.alive() or time.monotonic() > limit:
                raise RuntimeError(f"the echo relay did not start; see {log_path}")
            time.sleep(0.1)
        return node

    def wait_ready(
        self, nodes: Sequence[NodeProcess], topics: Topics, timeout: float = READY_TIMEOUT_S
    ) -> None:
        """Every node answers /health/ready, and the group holds every input partition (each
        node some), unchanged for a second."""
        launched = [n.launched for n in nodes]
        problem = launcher.wait_ready(launched, timeout) or launcher.wait_assigned(
            launched, topics.input, self.partitions, timeout, stable=1.0, every=0.2
        )
        if problem is not None:
            raise RuntimeError(f"{problem}; see the node logs in {nodes[0].log_path.parent}")

    def stop_nodes(self) -> dict[int, int | None]:
        by_name = launcher.stop_all([n.launched for n in self.nodes], 20.0)
        codes = {n.index: by_name[n.launched.name] for n in self.nodes}
        self.nodes = []
        return codes

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_nodes()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.broker.stop()
        for shard, postgres in enumerate(self.servers):
            if postgres is None:
                continue
            log_path = postgres.log_path
            with contextlib.suppress(Exception):
                postgres.stop()
            name = "postgres.log" if shard == 0 else f"postgres-shard{shard}.log"
            with contextlib.suppress(OSError):
                shutil.copyfile(log_path, self.logs_dir / name)


def _sql(url: str, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []
