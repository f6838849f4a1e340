"""The verdicts of the ``tenants`` scenarios on their fairness figures
(``loadtest.bench.results.tenants``):

* ``tenants``: the small tenants' p99 lateness over the messages due while the flood drains
  < ``TENANT_SMALL_P99_MS``, and the flood's drain rate >= ``TENANT_DRAIN_RATIO`` x the rate of
  ``tenants-control`` (the same load without tenant headers);
* ``tenants-200k``: the small tenants' p99 (all their messages) <= ``TENANT_SMALL_P99_MS``.
"""

from __future__ import annotations

from loadtest.analysis.delivery import Row
from loadtest.bench import scenarios as sc
from loadtest.bench.records import BenchRecord, ScenarioRecord

CONTROL = "tenants-control"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def tenant_rows(bench: BenchRecord) -> list[Row]:
    """The verdicts of every ``tenants`` scenario (the control is a reference row)."""
    recs = bench.by_kind("tenants")
    control = next((r for r in recs if r.name == CONTROL), None)
    control_rate = None
    if control is not None and control.ok and control.tenants is not None:
        control_rate = control.tenants.flood_drain_rate
    rows: list[Row] = []
    for rec in recs:
        rows.append(_row(rec, control_rate))
    return rows


def _row(rec: ScenarioRecord, control_rate: float | None) -> Row:
    limit = sc.TENANT_SMALL_P99_MS
    if rec.name == CONTROL:
        target = "the same load without tenant headers: the drain-rate reference"
    elif rec.name == "tenants":
        target = (
            f"small tenants' p99 < {limit:,.0f} ms while the flood drains; the flood drains at "
            f">= {sc.TENANT_DRAIN_RATIO:.0%} of {CONTROL}'s rate"
        )
    else:
        target = f"small tenants' p99 <= {limit:,.0f} ms"
    t = rec.tenants
    if not rec.ok or t is None:
        return Row(rec.name, target, rec.error or "did not run (or no tenant figures)", False)
    drain = f"flood drained at {t.flood_drain_rate or 0:,.0f} msg/s"
    worst = f"worst small tenant {t.small_worst_tenant} p99 {_ms(t.small_worst_p99_ms)}"
    if rec.name == CONTROL:
        measured = f"{drain}; small p99 {_ms(t.small_p99_ms)} (no tenants: oldest first)"
        return Row(rec.name, target, measured, None, "reference")
    if rec.name == "tenants":
        p99 = t.small_during_flood_p99_ms
        ratio = None
        if control_rate and t.flood_drain_rate is not None:
            ratio = t.flood_drain_rate / control_rate
        measured = (
            f"small p99 while draining {_ms(p99)} ({t.small_during_flood_count or 0:,.0f} msgs), "
            f"{worst}; {drain}"
            + (f" = {ratio:.0%} of the control" if ratio is not None else ", no control")
        )
        ok = p99 is not None and p99 < limit
        ok = ok and ratio is not None and ratio >= sc.TENANT_DRAIN_RATIO
        return Row(rec.name, target, measured, ok)
    p99 = t.small_p99_ms
    measured = f"small p99 {_ms(p99)}, max {_ms(t.small_max_ms)}, {worst}; {drain}"
    return Row(rec.name, target, measured, p99 is not None and p99 <= limit)
