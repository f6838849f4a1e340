"""What the firing loop's own Python costs per fired message, without a broker: run it after a
change to the firing path (the loop, the dispatcher, the publisher calls, the per-row metrics).

    python -m loadtest.probes.firing_cost [--rows 200000] [--batch 2000] [--tenants 0] [--runs 1]
                                          [--ack-delay-ms 0]

On a scratch Postgres (``loadtest.probes.scratch``, durable), each run in a fresh database, it
fills ``chronos_messages`` in SQL with ``--rows`` rows all due at one instant (just before the
loop starts; a key, a 100-byte value and one header each, spread over ``--tenants`` tenants, 0:
the default tenant), then runs one node's real firing loop (``FiringLoop`` on ``PostgresStore``,
default settings but the claim batch) against a publisher stub that acknowledges every record at
the next poll through its callback, until every row is published and deleted. Prints the drain
rate (rows per second of wall time) and this process's CPU time per row
(``time.process_time``, both threads of the loop: what Chronos spends in Python and in the
database driver per fired message; the database server is another process).
"""

from __future__ import annotations

import argparse
import bisect
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError

from chronos.kafka import DeliveryCallback
from chronos.observability import metrics
from chronos.protocol import Headers
from loadtest.probes.firing_loop import firing_loop
from loadtest.probes.scratch import (
    KNOWN_TENANTS,
    row_count,
    run_sql,
    scratch_database,
    scratch_server,
    server_now,
)

FILL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers, tenant)
SELECT 'm' || g, %(at)s, convert_to('key-' || g, 'UTF8'), convert_to(repeat('v', 100), 'UTF8'),
       '[{"trace": "dHJhY2UtaWQ="}]'::jsonb,
       CASE WHEN %(tenants)s > 0 THEN 't' || (g %% %(tenants)s) ELSE '' END
FROM generate_series(1, %(rows)s) g
"""


class AckingPublisher:
    """A ``Publisher`` that keeps no records: every produced record is acknowledged (success)
    at the first ``poll`` at least ``ack_delay`` seconds after it was produced (a broker's
    round trip), through its delivery callback. Counts records and their bytes.

    No lock: the dispatcher thread produces and polls (the loop thread polls only once the
    dispatcher has stopped), and a poll takes the pending list in one swap."""

    def __init__(self, ack_delay: float = 0.0) -> None:
        self.produced = 0
        self.produced_bytes = 0
        self.ack_delay = ack_delay
        self._pending: list[tuple[float, DeliveryCallback]] = []
        self.position = (0, 0)

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
        self._pending.append((time.monotonic(), on_delivery))

    def poll(self, timeout: float) -> int:
        if self.ack_delay:
            cut = time.monotonic() - self.ack_delay
            n = bisect.bisect_right(self._pending, cut, key=lambda p: p[0])
            ready, self._pending = self._pending[:n], self._pending[n:]
        else:
            ready, self._pending = self._pending, []
        error: KafkaError | None = None
        for _, callback in ready:
            callback(error)
        if not ready and timeout > 0:
            time.sleep(min(timeout, 0.001))
        return len(ready)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return 0

    def warm(self, topic: str, timeout: float) -> bool:
        return True

    def replace(self, cause: str) -> None:
        """Never cut off: acknowledges everything."""

    def __len__(self) -> int:
        return len(self._pending)


@dataclass(frozen=True)
class Run:
    """The figures of one drain."""

    rows: int
    wall_s: float
    cpu_s: float
    statements: dict[str, tuple[int, float]]  # claim/delete: (count, seconds)

    def line(self) -> str:
        spent = "; ".join(
            f"{n} {name}s {s:5.2f} s" for name, (n, s) in sorted(self.statements.items())
        )
        return (
            f"{self.rows} rows drained in {self.wall_s:6.2f} s ({self.rows / self.wall_s:7.0f} "
            f"rows/s); CPU {self.cpu_s:6.2f} s = {self.cpu_s / self.rows * 1e6:5.1f} us/row; "
            f"{spent}"
        )


def statement_totals() -> dict[str, tuple[int, float]]:
    """The node's statement-duration histogram so far: count and seconds per statement."""
    totals: dict[str, tuple[int, float]] = {}
    for family in metrics.STATEMENT_DURATION.collect():
        for sample in family.samples:
            name = sample.labels.get("statement", "")
            if name not in ("claim", "delete"):
                continue
            count, seconds = totals.get(name, (0, 0.0))
            if sample.name.endswith("_count"):
                count = int(sample.value)
            elif sample.name.endswith("_sum"):
                seconds = sample.value
            totals[name] = (count, seconds)
    return totals


def fill(url: str, args: argparse.Namespace) -> None:
    """``--rows`` rows due now, every tenant known, the table analyzed."""
    params = {"at": server_now(url), "rows": args.rows, "tenants": args.tenants}
    run_sql(url, FILL, params)
    run_sql(url, KNOWN_TENANTS)
    run_sql(url, "VACUUM ANALYZE chronos_messages")


def run(server_url: str, args: argparse.Namespace) -> Run:
    url = scratch_database(server_url, "firing_cost")
    fill(url, args)
    publisher = AckingPublisher(args.ack_delay_ms / 1000)
    loop, store, thread = firing_loop(url, args.batch, publisher)
    before = statement_totals()
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
    left = row_count(url)
    if publisher.produced != args.rows or left:
        raise SystemExit(f"{publisher.produced} of {args.rows} rows published, {left} left")
    after = statement_totals()
    spent = {
        name: (n - before.get(name, (0, 0.0))[0], s - before.get(name, (0, 0.0))[1])
        for name, (n, s) in after.items()
    }
    return Run(args.rows, wall, cpu, spent)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.firing_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--tenants", type=int, default=0, help="0: the default tenant only")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--ack-delay-ms",
        type=float,
        default=0.0,
        help="each record is acknowledged this long after it is produced (a broker round trip)",
    )
    args = parser.parse_args()
    with scratch_server("firing-cost") as server_url:
        for _ in range(args.runs):
            print(run(server_url, args).line(), flush=True)


if __name__ == "__main__":
    main()
