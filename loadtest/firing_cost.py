"""What the firing loop's own Python costs per fired message, without a broker (issue 11).

    python -m loadtest.firing_cost [--rows 200000] [--batch 2000] [--tenants 0]

Starts an embedded Postgres (durable), fills ``chronos_messages`` in SQL with ``--rows`` rows all
due at one instant (just before the loop starts; a key, a 100-byte value and one header each,
spread over ``--tenants`` tenants, 0: the default tenant), then runs one node's real firing loop
(``FiringLoop`` on ``PostgresStore``, default settings but the claim batch) against a publisher
stub that acknowledges every record at the next poll through its callback, until every row is
published and deleted. Prints the drain rate (rows per second of wall time) and this process's
CPU time per row (``time.process_time``, both threads of the loop: what Chronos spends in Python
and in the database driver per fired message; the database server is another process).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from confluent_kafka import KafkaError
from psycopg import sql

from chronos import migrate
from chronos.embedded import EmbeddedPostgres
from chronos.kafka import DeliveryCallback
from chronos.protocol import Headers
from loadtest.firing_harness import firing_loop

FILL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers, tenant)
SELECT 'm' || g, %(at)s, convert_to('key-' || g, 'UTF8'), convert_to(repeat('v', 100), 'UTF8'),
       '[{"trace": "dHJhY2UtaWQ="}]'::jsonb,
       CASE WHEN %(tenants)s > 0 THEN 't' || (g %% %(tenants)s) ELSE '' END
FROM generate_series(1, %(rows)s) g
"""
KNOWN = "INSERT INTO chronos_tenants (tenant) SELECT DISTINCT tenant FROM chronos_messages"
KNOWN_CONFLICT = " ON CONFLICT DO NOTHING"
COUNT = "SELECT count(*) FROM chronos_messages"


class AckingPublisher:
    """A ``Publisher`` that keeps no records: every produced record is acknowledged (success)
    at the next ``poll``, through its delivery callback. Counts records and their bytes.

    No lock: the dispatcher thread produces and polls (the loop thread polls only once the
    dispatcher has stopped), and a poll takes the pending list in one swap."""

    def __init__(self) -> None:
        self.produced = 0
        self.produced_bytes = 0
        self._pending: list[DeliveryCallback] = []

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_delivery: DeliveryCallback,
    ) -> None:
        self.produced += 1
        self.produced_bytes += len(key or b"") + len(value or b"")
        self._pending.append(on_delivery)

    def poll(self, timeout: float) -> int:
        ready, self._pending = self._pending, []
        error: KafkaError | None = None
        for callback in ready:
            callback(error)
        if not ready and timeout > 0:
            time.sleep(min(timeout, 0.001))
        return len(ready)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def __len__(self) -> int:
        return len(self._pending)


@dataclass(frozen=True)
class Run:
    """The figures of one drain."""

    rows: int
    wall_s: float
    cpu_s: float

    def line(self) -> str:
        return (
            f"{self.rows} rows drained in {self.wall_s:6.2f} s ({self.rows / self.wall_s:7.0f} "
            f"rows/s); CPU {self.cpu_s:6.2f} s = {self.cpu_s / self.rows * 1e6:5.1f} us/row"
        )


def fill(url: str, args: argparse.Namespace) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        at: datetime = row[0]
        conn.execute(FILL, {"at": at, "rows": args.rows, "tenants": args.tenants})
        conn.execute(KNOWN + KNOWN_CONFLICT)
        conn.execute("VACUUM ANALYZE chronos_messages")


def remaining(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(COUNT).fetchone()
        assert row is not None
        return int(row[0])


def run(server_url: str, args: argparse.Namespace) -> Run:
    name = f"firing_cost_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = server_url.rsplit("/", 1)[0] + "/" + name
    migrate.upgrade(url)
    fill(url, args)
    publisher = AckingPublisher()
    loop, store, thread = firing_loop(url, args.batch, publisher)
    cpu0, wall0 = time.process_time(), time.monotonic()
    thread.start()
    try:
        give_up = wall0 + 600
        while publisher.produced < args.rows and time.monotonic() < give_up:
            time.sleep(0.01)
    finally:
        loop.stop()  # the drain deletes the last delivered rows
        thread.join(30)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        store.close()
    left = remaining(url)
    if publisher.produced != args.rows or left:
        raise SystemExit(f"{publisher.produced} of {args.rows} rows published, {left} left")
    return Run(args.rows, wall, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--tenants", type=int, default=0, help="0: the default tenant only")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chronos-firing-cost-") as tmp:
        postgres = EmbeddedPostgres(Path(tmp) / "postgres", 0, workspace=Path(tmp))
        with postgres:
            for _ in range(args.runs):
                print(run(postgres.url, args).line(), flush=True)


if __name__ == "__main__":
    main()
