"""The soak's verdicts on canned figures and samples (no Spark): each PASS when it holds, FAIL
when it does not, n/a without its figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loadtest.analysis.soak.samples import SoakSample
from loadtest.analysis.soak.verdicts import (
    Backlog,
    RunFigures,
    Verdict,
    WindowLateness,
    Windows,
    memory_growth,
    sample_figures,
    verdicts,
    wal_per_row,
)
from tests.loadtest.soak_canned import BASE, SEND_S, samples

WINDOWS = Windows.of(BASE, BASE + SEND_S * 1000)


def _run(**changes: object) -> RunFigures:
    values: dict[str, object] = {
        "sent": 6000, "lost": 0, "early": 0, "duplicate_ids": 0, "p99_9_ms": 40.0,
        "max_ms": 40.0, "cancelled_fired": 0, "superseded_fired": 0, "advance_ms": 50,
        "first": WindowLateness(1000, 5.0, 40.0), "last": WindowLateness(1000, 9.0, 40.0),
    }  # fmt: skip
    values.update(changes)
    return RunFigures(**values)  # type: ignore[arg-type]


def _marks(found: list[Verdict]) -> dict[str, str]:
    return {v.name: v.mark for v in found}


def test_windows() -> None:
    assert WINDOWS.seconds == 120 and "fifth" in WINDOWS.basis
    assert WINDOWS.first == (BASE, BASE + 120_000)
    assert WINDOWS.last == (BASE + 480_000, BASE + 600_000)
    hour = Windows.of(BASE, BASE + 3_600_000)
    assert hour.seconds == 600 and "ten minutes" in hour.basis
    assert Windows.of(BASE, BASE + 3_000_000).seconds == 600  # 50 minutes: a fifth is ten


def test_every_verdict_passes_on_a_steady_run() -> None:
    figures = sample_figures(samples(), WINDOWS, rows_left=0)
    assert figures["memory"] == {
        "0": {"first_mb": 100.0, "last_mb": 100.0, "growth": 0.0},
        "1": {"first_mb": 100.0, "last_mb": 100.0, "growth": 0.0},
    }
    assert figures["bytes_per_row"] == {"first": 400.0, "last": 400.0}
    assert figures["wal_per_row_change"] == {"first": 300.0, "last": 300.0}
    assert figures["live_rows"] == {"first": 50, "last": 50, "peak": 50}
    assert figures["drain"]["rows_left"] == 0 and figures["drain"]["peak_total_bytes"] == 20_000
    found = verdicts(_run(), figures, WINDOWS)
    assert [v.name for v in found] == [
        "lost", "early", "actions", "p99.9", "drift", "memory", "table", "drained", "wal",
    ]  # fmt: skip
    assert set(_marks(found).values()) == {"PASS"}, [v for v in found if v.ok is not True]
    drift = next(v for v in found if v.name == "drift")
    assert "(1.07x)" in drift.value  # (9 + 50) / (5 + 50): from deadline - advance


def test_growth_bloat_wal_and_rows_left_fail() -> None:
    sampled = samples(
        pss=lambda t: 100 + 0.05 * t,
        bytes_per_row=lambda t: 400 + t,
        wal_per_change=lambda t: 300 if t < 300 else 600,
        final_rows=5,
    )
    growth = memory_growth(sampled, WINDOWS)
    assert growth[0]["first_mb"] == pytest.approx(104.5)  # mean over 60..120 s
    assert growth[0]["last_mb"] == pytest.approx(127.0)  # mean over 480..600 s
    assert wal_per_row(sampled, *WINDOWS.last) == pytest.approx(600.0)
    found = _marks(verdicts(_run(), sample_figures(sampled, WINDOWS, rows_left=5), WINDOWS))
    assert (found["memory"], found["table"], found["wal"], found["drained"]) == ("FAIL",) * 4
    assert found["lost"] == "PASS"


def _with_backlog(sampled: list[SoakSample], backlog: Backlog) -> list[SoakSample]:
    """The same samples with a backlog's rows and bytes in the table besides: its rows counted
    as inserted, and the statistics' live rows an estimate 20 % short, as a large table's is."""
    out = []
    for s in sampled:
        pg = s.pg
        if pg is not None:
            live = pg.live_rows + backlog.rows
            pg = replace(
                pg,
                live_rows=int(live * 0.8),
                rows_inserted=pg.rows_deleted + live,
                total_bytes=pg.total_bytes + backlog.bytes,
            )
        out.append(replace(s, pg=pg))
    return out


def test_a_backlog_stored_before_the_run_is_left_out_of_the_table_and_the_drain() -> None:
    backlog = Backlog(rows=100_000, bytes=50_000_000)  # 500 B a row, 2,000 times the turnover
    steady = _with_backlog(samples(), backlog)
    figures = sample_figures(steady, WINDOWS, rows_left=0, backlog=backlog)
    assert figures["bytes_per_row"] == {"first": 400.0, "last": 400.0}  # the turnover's
    found = {v.name: v for v in verdicts(_run(), figures, WINDOWS)}
    assert found["table"].mark == "PASS" and "100,000 rows stored before" in found["table"].target
    assert found["drained"].mark == "PASS" and "but the 100,000" in found["drained"].target
    # The turnover's rows bloat to three times their size: the backlog must not hide it (all
    # rows counted, the ratio would be 1.01).
    bloated = _with_backlog(samples(bytes_per_row=lambda t: 400 + 2 * t), backlog)
    figures = sample_figures(bloated, WINDOWS, rows_left=0, backlog=backlog)
    assert _marks(verdicts(_run(), figures, WINDOWS))["table"] == "FAIL"
    whole = sample_figures(bloated, WINDOWS, rows_left=0)
    assert _marks(verdicts(_run(), whole, WINDOWS))["table"] == "PASS"


def test_run_figures_fail() -> None:
    figures = sample_figures(samples(), WINDOWS, rows_left=0)
    found = _marks(
        verdicts(
            _run(lost=1, early=2, superseded_fired=1, p99_9_ms=51.0,
                 last=WindowLateness(1000, 20.0, 40.0)),
            figures,
            WINDOWS,
        )
    )  # fmt: skip
    assert found == {
        "lost": "FAIL", "early": "FAIL", "actions": "FAIL", "p99.9": "FAIL", "drift": "FAIL",
        "memory": "PASS", "table": "PASS", "drained": "PASS", "wal": "PASS",
    }  # fmt: skip


def test_missing_figures_are_not_judged() -> None:
    bare = [SoakSample(t_ms=BASE + t * 1000) for t in range(0, SEND_S, 10)]
    figures = sample_figures(bare, WINDOWS, rows_left=None)
    found = _marks(
        verdicts(_run(p99_9_ms=None, first=WindowLateness(0, None, None)), figures, WINDOWS)
    )
    for name in ("p99.9", "drift", "memory", "table", "drained", "wal"):
        assert found[name] == "n/a", name
    assert Verdict("x", "", "", None).as_dict()["mark"] == "n/a"
