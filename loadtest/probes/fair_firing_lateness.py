"""One node's firing loop under a flood, with and without tenants (the small tenants' lateness,
the flood's drain rate): run it after a change to the fair claim or to how the loop claims.

    python -m loadtest.probes.fair_firing_lateness [--flood 200000] [--small-tenants 20]
                                                   [--per-small 10] [--batch 2000] [--lead 20]

On a scratch Postgres (``loadtest.probes.scratch``, durable), for each of two runs in a fresh
database, it fills ``chronos_messages`` in SQL with one tenant's ``--flood`` rows due at one
instant T and, for ``--small-tenants`` other tenants, ``--per-small`` rows each due from
T + 0.5 s (50 ms apart); then runs one node's real firing loop (``FiringLoop`` on
``PostgresStore``, default settings but the claim batch) against an in-memory publisher until
every row is published. The second run is the same rows without tenants (all the default
tenant). Prints, per run, the small tenants' lateness (publish time minus deadline: p50, p99,
worst) and the flood's drain rate (rows from T to its last row's publish).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chronos.testing import FakePublisher
from loadtest.probes.firing_loop import firing_loop
from loadtest.probes.scratch import (
    KNOWN_TENANTS,
    run_sql,
    scratch_database,
    scratch_server,
    server_now,
)

FILL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, tenant)
SELECT 'f' || g, %(at)s, 'flood'::bytea, '\\x00'::bytea, %(flood_tenant)s
FROM generate_series(1, %(flood)s) g
"""
FILL_SMALL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, tenant)
SELECT 's' || t || '-' || i, d, convert_to('small', 'UTF8'),
       convert_to((extract(epoch FROM d) * 1000)::bigint::text, 'UTF8'),
       CASE WHEN %(tenants)s THEN 's' || t ELSE '' END
FROM generate_series(1, %(small)s) t, generate_series(0, %(per_small)s - 1) i,
     LATERAL (SELECT %(at)s + interval '500 milliseconds' + i * interval '50 milliseconds' AS d) x
"""


@dataclass(frozen=True)
class Run:
    """The figures of one run."""

    tenants: bool
    small_p50_ms: float
    small_p99_ms: float
    small_worst_ms: float
    flood_rows: int
    flood_drain_s: float

    def line(self) -> str:
        label = "with tenants   " if self.tenants else "without tenants"
        return (
            f"{label} small tenants' lateness p50 {self.small_p50_ms:7.0f} ms  "
            f"p99 {self.small_p99_ms:7.0f} ms  worst {self.small_worst_ms:7.0f} ms;  flood "
            f"{self.flood_rows} rows drained in {self.flood_drain_s:5.1f} s "
            f"({self.flood_rows / self.flood_drain_s:6.0f} rows/s)"
        )


def run(server_url: str, args: argparse.Namespace, tenants: bool) -> Run:
    url = scratch_database(server_url, "fair_tenants" if tenants else "fair_none")
    at = server_now(url) + timedelta(seconds=args.lead)
    flood_tenant = "flood" if tenants else ""
    run_sql(url, FILL, {"at": at, "flood_tenant": flood_tenant, "flood": args.flood})
    small = {
        "at": at,
        "tenants": tenants,
        "small": args.small_tenants,
        "per_small": args.per_small,
    }
    run_sql(url, FILL_SMALL, small)
    run_sql(url, KNOWN_TENANTS)
    run_sql(url, "ANALYZE chronos_messages")
    if datetime.now(UTC) > at - timedelta(seconds=1):
        raise SystemExit("filling took longer than --lead: raise it")
    publisher = FakePublisher()
    loop, store, thread = firing_loop(url, args.batch, publisher)
    thread.start()
    total = args.flood + args.small_tenants * args.per_small
    try:
        give_up = time.monotonic() + args.lead + 600
        while len(publisher.records) < total and time.monotonic() < give_up:
            time.sleep(0.2)
    finally:
        loop.stop()
        thread.join(30)
        store.close()
    records = list(publisher.records)
    at_ms = at.timestamp() * 1000
    flood = [r.timestamp_ms for r in records if r.key == b"flood"]
    # A small row's value is its deadline in epoch ms.
    lateness = sorted(r.timestamp_ms - int(r.value or b"0") for r in records if r.key == b"small")
    return Run(
        tenants,
        statistics.median(lateness),
        lateness[int(0.99 * (len(lateness) - 1))],
        lateness[-1],
        len(flood),
        (max(flood) - at_ms) / 1000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.fair_firing_lateness", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--flood", type=int, default=200_000)
    parser.add_argument("--small-tenants", type=int, default=20)
    parser.add_argument("--per-small", type=int, default=10)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--lead", type=float, default=20.0, help="seconds to fill before T")
    args = parser.parse_args()
    with scratch_server("fair-firing") as server_url:
        for tenants in (True, False):
            print(run(server_url, args, tenants).line(), flush=True)


if __name__ == "__main__":
    main()
