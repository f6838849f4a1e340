"""The soak's verdicts, each PASS or FAIL (``n/a`` when its figures are missing), from the
analysis's figures and the samples: no Spark here, so they are tested on canned figures.

The *windows* compare the start of the sending with its end: the first and last ten minutes
of a run of 50 minutes or more, the first and last fifth of a shorter one (``Windows.of``).

* ``lost``, ``early``: none (the run's whole analysis, ``loadtest.analysis.summary``);
* ``actions``: no cancelled message and no schedule a reschedule replaced ever fired;
* ``p99.9``: lateness p99.9 over the whole run <= 50 ms;
* ``drift``: the last window's p99 <= 1.2 x the first window's, both measured from the
  earliest instant a message may fire (deadline - timing advance), so that a p99 near or below
  the deadline still compares as a ratio;
* ``memory``: each node's PSS in the last window (mean) <= 1.1 x its PSS at the end of the
  first window (mean over that window's second half);
* ``table``: table + index bytes per live row at the end of the sending <= 1.5 x the same at
  the end of the first window (the size follows the standing backlog, no bloat beyond it); with
  a backlog stored before the run (``soak --backlog``), the rows turning over alone: the size
  it had once stored taken off, over the rows counted exactly (``bytes_per_row``);
* ``drained``: no row left after the drain but the backlog's (the size then is reported:
  Postgres keeps the pages it freed for reuse, the files do not shrink without ``VACUUM FULL``);
* ``wal``: WAL bytes per row written or removed (insert, update, delete of the table) in the
  last window within 1.5x of the first window's, either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from loadtest.analysis.soak.samples import SoakSample

WINDOW_S = 600.0  # ten minutes; a fifth of the sending when that is shorter
P99_9_LIMIT_MS = 50.0
DRIFT_FACTOR = 1.2
MEMORY_GROWTH = 0.10
BYTES_PER_ROW_FACTOR = 1.5
WAL_FACTOR = 1.5


@dataclass(frozen=True, slots=True)
class Windows:
    """The first and last window of the sending, epoch ms."""

    start_ms: int
    end_ms: int
    seconds: float
    basis: str

    @classmethod
    def of(cls, start_ms: int, end_ms: int) -> Windows:
        span_s = max(0.0, (end_ms - start_ms) / 1000)
        if span_s / 5 >= WINDOW_S:
            return cls(start_ms, end_ms, WINDOW_S, "the first and last ten minutes")
        return cls(start_ms, end_ms, span_s / 5, "the first and last fifth (a short run)")

    @property
    def first(self) -> tuple[int, int]:
        return self.start_ms, self.start_ms + round(self.seconds * 1000)

    @property
    def last(self) -> tuple[int, int]:
        return self.end_ms - round(self.seconds * 1000), self.end_ms

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "first": list(self.first), "last": list(self.last)}


@dataclass(frozen=True, slots=True)
class WindowLateness:
    """Lateness (ms, first output copy) of the messages due in one window."""

    count: int
    p99_ms: float | None
    p99_9_ms: float | None


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What the Spark analysis found over the whole run."""

    sent: int  # fires expected
    lost: int
    early: int
    duplicate_ids: int
    p99_9_ms: float | None
    max_ms: float | None
    cancelled_fired: int
    superseded_fired: int
    advance_ms: int
    first: WindowLateness
    last: WindowLateness
    not_applied: int = 0  # follow-ups that reached a claimed message (not applied, by contract)


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    target: str
    value: str
    ok: bool | None  # None: not computable

    @property
    def mark(self) -> str:
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.ok]

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mark": self.mark}


# -- the samples' windows ---------------------------------------------------------------------
def _inside(samples: Sequence[SoakSample], lo: int, hi: int) -> list[SoakSample]:
    return [s for s in samples if lo <= s.t_ms <= hi and not s.final]


def _nearest(samples: Sequence[SoakSample], at: int) -> SoakSample | None:
    pool = [s for s in samples if not s.final and s.pg is not None]
    return min(pool, key=lambda s: abs(s.t_ms - at)) if pool else None


def _mean(values: Sequence[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return sum(known) / len(known) if known else None


def memory_growth(samples: Sequence[SoakSample], w: Windows) -> dict[int, dict[str, Any]]:
    """Per node: PSS (MB) over the first window's second half and over the last window."""
    lo, hi = w.first
    base = _inside(samples, (lo + hi) // 2, hi)
    end = _inside(samples, *w.last)
    nodes = sorted({i for s in samples for i in s.pss_mb})
    out: dict[int, dict[str, Any]] = {}
    for i in nodes:
        first = _mean([s.pss_mb.get(i) for s in base])
        last = _mean([s.pss_mb.get(i) for s in end])
        growth = None if not first or last is None else last / first - 1
        out[i] = {
            "first_mb": None if first is None else round(first, 1),
            "last_mb": None if last is None else round(last, 1),
            "growth": None if growth is None else round(growth, 4),
        }
    return out


@dataclass(frozen=True, slots=True)
class Backlog:
    """The rows stored before the run (due a week later, never fired) and the table's size
    (table + indexes) once they were: taken off the turnover's figures."""

    rows: int = 0
    bytes: int = 0

    @classmethod
    def of(cls, record: dict[str, Any]) -> Backlog:
        stored = record.get("backlog") or {}
        return cls(int(stored.get("rows") or 0), int(stored.get("table_bytes") or 0))


def bytes_per_row(sample: SoakSample | None, backlog: Backlog = Backlog()) -> float | None:
    """Table + index bytes per live row (the statistics' estimate); with a backlog, of the
    turnover alone: its size less the backlog's, over its rows counted exactly (rows inserted
    less rows deleted, less the backlog's: the estimate is off by hundreds of thousands on a
    table of millions, 1.6 M for 2.06 M in a ten-minute run)."""
    if sample is None or sample.pg is None:
        return None
    pg = sample.pg
    rows = pg.rows_inserted - pg.rows_deleted - backlog.rows if backlog.rows else pg.live_rows
    return None if rows <= 0 else (pg.total_bytes - backlog.bytes) / rows


def wal_per_row(samples: Sequence[SoakSample], lo: int, hi: int) -> float | None:
    """WAL bytes per row written or removed between the first and last sample of [lo, hi]."""
    inside = [s for s in _inside(samples, lo, hi) if s.pg is not None]
    if len(inside) < 2:
        return None
    a, b = inside[0].pg, inside[-1].pg
    assert a is not None and b is not None
    changes = b.row_changes - a.row_changes
    return (b.wal_bytes - a.wal_bytes) / changes if changes > 0 else None


def sample_figures(
    samples: Sequence[SoakSample],
    w: Windows,
    rows_left: int | None,
    backlog: Backlog = Backlog(),
) -> dict[str, Any]:
    """The windows' figures from the samples, and the drain's (``rows_left``: the exact count
    after the drain, the backlog's rows not counted)."""
    first_at, last_at = _nearest(samples, w.first[1]), _nearest(samples, w.end_ms)
    with_pg = [s.pg for s in samples if s.pg is not None]
    final = next((s for s in reversed(samples) if s.final and s.pg is not None), None)
    peak = max((p.total_bytes for p in with_pg), default=None)
    return {
        "memory": {str(k): v for k, v in memory_growth(samples, w).items()},
        "bytes_per_row": {
            "first": _round(bytes_per_row(first_at, backlog)),
            "last": _round(bytes_per_row(last_at, backlog)),
        },
        "backlog": asdict(backlog),
        "live_rows": {
            "first": None if first_at is None or first_at.pg is None else first_at.pg.live_rows,
            "last": None if last_at is None or last_at.pg is None else last_at.pg.live_rows,
            "peak": max((p.live_rows for p in with_pg), default=None),
        },
        "wal_per_row_change": {
            "first": _round(wal_per_row(samples, *w.first)),
            "last": _round(wal_per_row(samples, *w.last)),
        },
        "drain": {
            "rows_left": rows_left,
            "total_bytes": None if final is None or final.pg is None else final.pg.total_bytes,
            "peak_total_bytes": peak,
            "dead_rows": None if final is None or final.pg is None else final.pg.dead_rows,
        },
    }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


# -- the verdicts -----------------------------------------------------------------------------
def verdicts(run: RunFigures, figures: dict[str, Any], w: Windows) -> list[Verdict]:
    out = [
        Verdict("lost", "0", f"{run.lost:,} of {run.sent:,}", run.lost == 0),
        Verdict(
            "early", "0", f"{run.early:,} (before deadline - {run.advance_ms} ms)", run.early == 0
        ),
        Verdict(
            "actions",
            "no cancelled or replaced message fires",
            f"{run.cancelled_fired} cancelled, {run.superseded_fired} replaced fired"
            + (
                f" ({run.not_applied} reached a claimed message: not applied)"
                if run.not_applied
                else ""
            ),
            run.cancelled_fired == 0 and run.superseded_fired == 0,
        ),
        Verdict(
            "p99.9",
            f"<= {P99_9_LIMIT_MS:g} ms over the whole run",
            _ms(run.p99_9_ms),
            None if run.p99_9_ms is None else run.p99_9_ms <= P99_9_LIMIT_MS,
        ),
    ]
    first = None if run.first.p99_ms is None else run.first.p99_ms + run.advance_ms
    last = None if run.last.p99_ms is None else run.last.p99_ms + run.advance_ms
    ratio = _ratio(last, first)
    out.append(
        Verdict(
            "drift",
            f"last window's p99 <= {DRIFT_FACTOR:g} x the first's ({w.basis}; from deadline - "
            "advance)",
            f"p99 {_ms(run.first.p99_ms)} -> {_ms(run.last.p99_ms)}"
            + ("" if ratio is None else f" ({ratio:.2f}x)"),
            None if ratio is None else ratio <= DRIFT_FACTOR,
        )
    )
    memory = figures["memory"]
    growths = [v["growth"] for v in memory.values()]
    known = [g for g in growths if g is not None]
    out.append(
        Verdict(
            "memory",
            f"each node's PSS grows <= {MEMORY_GROWTH:.0%} after the first window",
            "; ".join(
                f"node {k} {v['first_mb']} -> {v['last_mb']} MB"
                + ("" if v["growth"] is None else f" ({v['growth']:+.1%})")
                for k, v in memory.items()
            )
            or "no samples",
            None if not known or len(known) < len(growths) else max(known) <= MEMORY_GROWTH,
        )
    )
    bpr = figures["bytes_per_row"]
    ratio = _ratio(bpr["last"], bpr["first"])
    backlog = (figures.get("backlog") or {}).get("rows") or 0
    beside = f" (the turnover's: the {backlog:,} rows stored before the run off)" if backlog else ""
    out.append(
        Verdict(
            "table",
            f"table + index bytes per live row at the end <= {BYTES_PER_ROW_FACTOR:g} x at the "
            f"end of the first window{beside}",
            f"{bpr['first']} -> {bpr['last']} B per row"
            + ("" if ratio is None else f" ({ratio:.2f}x)"),
            None if ratio is None else ratio <= BYTES_PER_ROW_FACTOR,
        )
    )
    drain = figures["drain"]
    left = drain["rows_left"]
    size, peak = drain["total_bytes"], drain["peak_total_bytes"]
    share = "" if not size or not peak else f", {size / peak:.0%} of its peak"
    out.append(
        Verdict(
            "drained",
            "0 rows left after the drain"
            + (f" but the {backlog:,} of the backlog" if backlog else ""),
            f"{left} rows left; {_mb(size)} MB{share} (freed pages kept for reuse)",
            None if left is None else left == 0,
        )
    )
    wal = figures["wal_per_row_change"]
    ratio = _ratio(wal["last"], wal["first"])
    out.append(
        Verdict(
            "wal",
            f"WAL bytes per row change, last window within {WAL_FACTOR:g}x of the first",
            f"{wal['first']} -> {wal['last']} B" + ("" if ratio is None else f" ({ratio:.2f}x)"),
            None if ratio is None else 1 / WAL_FACTOR <= ratio <= WAL_FACTOR,
        )
    )
    return out


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g} ms"


def _mb(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 1024 / 1024:,.1f}"
