"""What the per-tenant backlog statement costs at 1 M rows and 10,000 tenants, against the
node's statement timeout: run it after a change to ``tenant_backlog`` or the tenant indexes.

    python -m loadtest.probes.tenant_backlog_cost [--rows 1000000] [--tenants 10000]
                                                  [--overdue 0.5] [--runs 10]

On a scratch Postgres (``loadtest.probes.scratch``, durable) it fills ``chronos_messages`` in
SQL with ``--rows`` rows spread evenly over ``--tenants`` tenants, the ``--overdue`` fraction of
each tenant's rows overdue and the others an hour ahead, then analyzes the table. Through
``PostgresStore`` (prepared statements, as a node runs them, in a session with the node's
statement timeout) it times ``--runs`` calls of ``tenant_backlog`` as the leader's monitor makes
them (the busiest ``tenant_metrics_top`` tenants, the default walk) and as
``GET /admin/v1/tenants`` makes them, and prints the median and worst latency, how many tenants
each walked and whether the walk was capped (then the gauges and the API say so).
"""

from __future__ import annotations

import argparse
import statistics
import time

from chronos.admin.api import TENANT_WALK_LIMIT
from chronos.store import COUNT_LIMIT, PostgresStore
from loadtest.probes.firing_loop import probe_settings
from loadtest.probes.scratch import KNOWN_TENANTS, row_count, run_sql, scratch_postgres

FILL = """
INSERT INTO chronos_messages (id, deadline, message_value, tenant)
SELECT 'm' || g,
       CASE WHEN (g / %(tenants)s) < %(per_tenant)s * %(overdue)s
            THEN now() - interval '10 minutes' + (g / %(tenants)s) * interval '1 ms'
            ELSE now() + interval '1 hour' + (g / %(tenants)s) * interval '1 ms' END,
       '\\x00'::bytea, 't' || lpad((g %% %(tenants)s)::text, 6, '0')
FROM generate_series(0, %(rows)s - 1) g;
"""
ANALYZE = "VACUUM ANALYZE chronos_messages;"


def timed(store: PostgresStore, runs: int, **kwargs: int) -> tuple[list[float], int, bool]:
    durations: list[float] = []
    walked, capped = 0, False
    for _ in range(runs):
        started = time.perf_counter()
        result = store.tenant_backlog(10, **kwargs)
        durations.append((time.perf_counter() - started) * 1000)
        walked, capped = len(result.tenants), result.tenants_capped
    return sorted(durations), walked, capped


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.tenant_backlog_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--overdue", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    settings = probe_settings()
    timeout_ms = settings.effective_statement_timeout_ms
    sizes = {
        "rows": args.rows,
        "tenants": args.tenants,
        "per_tenant": args.rows // args.tenants,
        "overdue": args.overdue,
    }
    with scratch_postgres("tenant-backlog") as url:
        started = time.perf_counter()
        run_sql(url, FILL, sizes)
        run_sql(url, KNOWN_TENANTS)
        run_sql(url, ANALYZE)
        print(
            f"{row_count(url)} rows, {args.tenants} tenants ({args.overdue:.0%} of each tenant's "
            f"rows overdue), filled in {time.perf_counter() - started:.0f} s; "
            f"statement timeout {timeout_ms} ms"
        )
        store = PostgresStore(url, statement_timeout_ms=timeout_ms)
        try:
            calls = {
                f"monitor (top {settings.tenant_metrics_top})": {
                    "limit": settings.tenant_metrics_top,
                    "count_limit": COUNT_LIMIT,
                },
                f"admin API (walk {TENANT_WALK_LIMIT})": {
                    "limit": 100,
                    "count_limit": COUNT_LIMIT,
                    "max_tenants": TENANT_WALK_LIMIT,
                },
                f"every tenant (walk {args.tenants + 1})": {
                    "limit": settings.tenant_metrics_top,
                    "count_limit": COUNT_LIMIT,
                    "max_tenants": args.tenants + 1,
                },
            }
            for label, kwargs in calls.items():
                series, listed, capped = timed(store, args.runs, **kwargs)
                print(
                    f"{label:<28} median {statistics.median(series):8.1f} ms  "
                    f"worst {series[-1]:8.1f} ms  ({series[-1] / timeout_ms:.0%} of the timeout)"
                    f"  {listed} tenants listed, walk {'capped' if capped else 'complete'}"
                )
        finally:
            store.close()


if __name__ == "__main__":
    main()
