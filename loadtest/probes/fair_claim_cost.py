"""What the fair claim costs at 1 M rows and 2,000 tenants, one of them flooding, against the
plain oldest-first claim: run it after a change to the claim statements or the tenant indexes.

    python -m loadtest.probes.fair_claim_cost [--flood 900000] [--tenants 2000] [--per-tenant 50]
                                              [--due-per-tenant 1] [--batch 2000] [--claims 30]

On a scratch Postgres (``loadtest.probes.scratch``, durable) it fills ``chronos_messages`` in
SQL: the flood's rows all due, then ``--per-tenant`` rows for each of the other tenants,
``--due-per-tenant`` of them due (after the flood's) and the others half an hour ahead; every
tenant is known (``chronos_tenants``). Then, through ``PostgresStore`` (prepared statements, as a
node runs them), it times ``--claims`` claims of ``--batch`` rows each: the plain oldest-first
claim, the fair claim, the fair claim with a window of every tenant, and the fair claim with the
flood excluded (its share of the claim-ahead budget held), interleaved, each claim given back
before the next (untimed); first on the table never analyzed, then analyzed. Prints the median,
p95 and worst latency in ms and the rows a claim takes per second of its median latency.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass

from chronos.store import PostgresStore
from loadtest.probes.scratch import row_count, run_sql, scratch_postgres

FILL = """
ALTER TABLE chronos_messages SET (autovacuum_enabled = false);
INSERT INTO chronos_messages (id, deadline, message_value, tenant)
SELECT 'f' || g, now() - interval '1 minute' + g * interval '1 microsecond', '\\x00'::bytea,
       'flood'
FROM generate_series(1, %(flood)s) g;
INSERT INTO chronos_tenants (tenant)
SELECT 't' || lpad(t::text, 5, '0') FROM generate_series(1, %(tenants)s - 1) t;
INSERT INTO chronos_tenants (tenant) VALUES ('flood') ON CONFLICT DO NOTHING;
INSERT INTO chronos_messages (id, deadline, message_value, tenant)
SELECT 't' || t || '-' || i,
       CASE WHEN i > %(due_per_tenant)s THEN now() + interval '30 minutes'
            ELSE now() - interval '30 seconds' END,
       '\\x00'::bytea, 't' || lpad(t::text, 5, '0')
FROM generate_series(1, %(tenants)s - 1) t, generate_series(1, %(per_tenant)s) i;
"""
ANALYZE = """
VACUUM ANALYZE chronos_messages;
ANALYZE chronos_tenants;
"""


@dataclass(frozen=True)
class ClaimCost:
    """The latency of a series of claims of one kind."""

    kind: str
    analyzed: bool
    claims: int
    rows: int
    median_ms: float
    p95_ms: float
    worst_ms: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / (self.median_ms * self.claims / 1000)

    def line(self) -> str:
        state = "analyzed" if self.analyzed else "never analyzed"
        return (
            f"{self.kind:<28} {state:<15} median {self.median_ms:7.1f} ms  "
            f"p95 {self.p95_ms:7.1f} ms  worst {self.worst_ms:7.1f} ms  "
            f"{self.rows / self.claims:6.0f} rows/claim  ~{self.rows_per_s:8.0f} rows/s"
        )


@dataclass(frozen=True)
class Kind:
    """One kind of claim: its label and the store's claim options."""

    label: str
    window: int
    fair: bool = False
    exclude: tuple[str, ...] = ()


def measure(
    store: PostgresStore, kinds: list[Kind], analyzed: bool, claims: int, batch: int
) -> list[ClaimCost]:
    """``claims`` claims of each kind, interleaved (the machine's drift hits every kind alike),
    each given back (untimed) so that every claim sees the same table, as under a steady flood."""
    node = str(uuid.uuid4())
    durations: dict[str, list[float]] = {k.label: [] for k in kinds}
    rows = dict.fromkeys(durations, 0)
    for _ in range(claims):
        for kind in kinds:
            store.fair_tenants_per_claim = kind.window
            started = time.perf_counter()
            claimed = store.claim(node, 0, batch, 10, fair=kind.fair, exclude_tenants=kind.exclude)
            durations[kind.label].append((time.perf_counter() - started) * 1000)
            rows[kind.label] += len(claimed)
            store.release(node, [(r.id, r.readied_at) for r in claimed], failed=False)
    results = []
    for label, series in durations.items():
        series.sort()
        results.append(
            ClaimCost(
                label,
                analyzed,
                claims,
                rows[label],
                statistics.median(series),
                series[int(0.95 * (len(series) - 1))],
                series[-1],
            )
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.fair_claim_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--flood", type=int, default=900_000)
    parser.add_argument("--tenants", type=int, default=2_000)
    parser.add_argument("--per-tenant", type=int, default=50)
    parser.add_argument("--due-per-tenant", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--claims", type=int, default=30)
    args = parser.parse_args()
    sizes = {
        "flood": args.flood,
        "tenants": args.tenants,
        "per_tenant": args.per_tenant,
        "due_per_tenant": args.due_per_tenant,
    }
    with scratch_postgres("fair-cost") as url:
        started = time.perf_counter()
        run_sql(url, FILL, sizes)
        print(
            f"{row_count(url)} rows, {args.tenants} tenants (flood {args.flood}), "
            f"filled in {time.perf_counter() - started:.0f} s; claims of {args.batch} rows"
        )
        store = PostgresStore(url)
        try:
            t = min(args.tenants, args.batch)  # the store visits at most a batch of tenants
            kinds = [
                Kind("plain (oldest first)", 500),
                Kind("fair (window 500)", 500, fair=True),
                Kind(f"fair (window {t})", t, fair=True),
                Kind(f"fair, flood excluded (w {t})", t, exclude=("flood",)),
            ]
            for analyzed in (False, True):
                if analyzed:
                    run_sql(url, ANALYZE)
                for result in measure(store, kinds, analyzed, args.claims, args.batch):
                    print(result.line())
        finally:
            store.close()


if __name__ == "__main__":
    main()
