"""Late or lost: the Spark classification of every sent message against hand-computed values,
and the benchmark's delivery rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtest.analysis.delivery import (
    Delivery,
    LossLocation,
    delivery_rows,
    late_text,
    locate_loss,
)
from loadtest.analysis.summary import analyze_dir
from loadtest.harness.events import RECEIVED_SCHEMA, SENT_SCHEMA, DrainWindow

BASE = 2_000_000  # run start (epoch ms)
WINDOW_END = BASE + 30_000  # last deadline + drain timeout
OUT, DL = "chronos-output", "chronos-dead-letter"


def _write_run(path: Path, *, window: bool = True) -> None:
    """Ten messages b0..b9, every one due at BASE + 10,000 + i (lateness below is against it):

    b0 on time (lateness 10), b1 late in the window (800), b2 after the window (lateness 5,000,
    received 2,000 ms after the window end), b3 after the window (9,000; received 7,000 after),
    b4 on time although a second copy arrived after the window (the first copy counts), b5 only
    dead-lettered, b6 never received, b7 received exactly at the window end with lateness
    exactly the limit (500: on time), b8 lateness 501 within the window (late), b9 fired on time
    and also dead-lettered (fired counts).
    """
    path.mkdir()
    deadline = [BASE + 10_000 + i for i in range(10)]
    sent = [
        {
            "id": f"b{i}",
            "key": None,
            "deadline_ms": deadline[i],
            "sent_ms": BASE + i,
            "payload_bytes": 10,
            "slot_ms": BASE + i,
        }
        for i in range(10)
    ]
    received: list[dict[str, Any]] = []

    def rec(i: int, late: int, receive: int, dead: bool = False) -> None:
        received.append(
            {
                "id": f"b{i}",
                "topic": DL if dead else OUT,
                "partition": 0,
                "offset": len(received),
                "deadline_ms": deadline[i],
                "publish_ms": deadline[i] + late,
                "receive_ms": receive,
                "is_dead_letter": dead,
                "dead_letter_reason": "x" if dead else None,
            }
        )

    rec(0, 10, deadline[0] + 15)
    rec(1, 800, deadline[1] + 805)
    rec(2, 5_000, WINDOW_END + 2_000)
    rec(3, 9_000, WINDOW_END + 7_000)
    rec(4, 100, deadline[4] + 105)
    rec(4, 4_000, WINDOW_END + 1)  # a later copy: still on time
    rec(5, 0, deadline[5] - 5_000, dead=True)
    rec(7, 500, WINDOW_END)
    rec(8, 501, deadline[8] + 510)
    rec(9, -20, deadline[9] - 15)
    rec(9, 0, deadline[9] - 5_000, dead=True)
    pq.write_table(pa.Table.from_pylist(sent, schema=SENT_SCHEMA), path / "sent.parquet")
    pq.write_table(
        pa.Table.from_pylist(received, schema=RECEIVED_SCHEMA), path / "received.parquet"
    )
    run: dict[str, Any] = {"run_id": "late", "start_ms": BASE, "params": {"timing_advance_ms": 50}}
    if window:
        run["drain"] = DrainWindow(
            window_end_ms=WINDOW_END,
            grace_end_ms=WINDOW_END + 60_000,
            grace_s=60.0,
            ended_ms=WINDOW_END + 60_000,
            received_at_window_end=7,
            received_at_end=9,
        ).as_dict()
    (path / "run.json").write_text(json.dumps(run))


@pytest.fixture(scope="module")
def summary(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results = tmp_path_factory.mktemp("late") / "run"
    _write_run(results)
    return analyze_dir(spark, results, report=False)


def test_every_sent_message_in_one_class(summary: dict[str, Any]) -> None:
    d = Delivery.from_dict(summary["delivery"])
    assert d is not None
    assert (d.on_time, d.late_in_window, d.late_after_window) == (4, 2, 2)  # b0 b4 b7 b9 / b1 b8
    assert (d.dead_lettered, d.lost) == (1, 1)  # b5 / b6
    assert d.on_time + d.late + d.dead_lettered + d.lost == d.sent == 10
    assert summary["delivery"]["late"] == 4
    assert d.window_end_ms == WINDOW_END and d.late_limit_ms == 500
    # Only b6 is lost: late messages are not.
    assert summary["counts"]["lost"] == 1 and summary["counts"]["lost_sample"] == ["b6"]
    assert summary["sla"]["no_loss"] is False


def test_how_late(summary: dict[str, Any]) -> None:
    d = Delivery.from_dict(summary["delivery"])
    assert d is not None
    assert d.late_max_ms == 9_000  # b3
    assert (d.after_window_lateness_min_ms, d.after_window_lateness_max_ms) == (5_000, 9_000)
    assert d.after_window_max_ms == 7_000  # b3, received 7 s after the window
    assert d.after_window_sample == ["b2", "b3"]
    # Messages received after the window are in the lateness figures (they fired).
    assert summary["lateness_ms"]["count"] == 8 and summary["lateness_ms"]["max"] == 9_000
    assert late_text(d) == (
        "2 late after the window (lateness 5.0 s–9.0 s, received up to 7.0 s after it)"  # noqa: RUF001
    )


def test_run_without_a_window(spark: Any, tmp_path: Path) -> None:
    """Older runs recorded no window: everything received counts as within it."""
    results = tmp_path / "old"
    _write_run(results, window=False)
    d = Delivery.from_dict(analyze_dir(spark, results, report=False)["delivery"])
    assert d is not None and d.window_end_ms is None
    assert (d.on_time, d.late_in_window, d.late_after_window, d.lost) == (4, 4, 0, 1)
    assert d.after_window_max_ms is None and d.after_window_sample == []
    assert late_text(d) == ""


def _records(late_after: int, lost: int, **extra: Any) -> list[dict[str, Any]]:
    delivery = Delivery(
        sent=100,
        on_time=100 - late_after - lost,
        late_in_window=0,
        late_after_window=late_after,
        dead_lettered=0,
        lost=lost,
        late_limit_ms=500,
        window_end_ms=WINDOW_END,
        late_max_ms=52_100 if late_after else None,
        after_window_lateness_max_ms=52_100 if late_after else None,
        after_window_lateness_min_ms=31_000 if late_after else None,
        after_window_max_ms=12_300 if late_after else None,
    )
    rec = {
        "name": "burst",
        "kind": "burst",
        "status": "ok",
        "summary": {"counts": {"lost": lost}, "delivery": delivery.as_dict()},
        **extra,
    }
    return [rec]


def test_delivery_rows_late_is_not_lost() -> None:
    rows = [r.as_dict() for r in delivery_rows(_records(late_after=18, lost=0))]
    assert rows[0]["target"].startswith("no message lost") and rows[0]["pass"] is True
    assert rows[0]["measured"] == "none lost"
    assert rows[1]["pass"] is None
    assert rows[1]["measured"] == (
        "burst: 18 late after the window (lateness 31.0 s–52.1 s, received up to 12.3 s after it)"  # noqa: RUF001
    )


def test_delivery_rows_real_loss_located() -> None:
    location = LossLocation(lost=7, still_stored=3, output_holes=2, stored_sample=["r-1"])
    recs = _records(
        late_after=0,
        lost=7,
        loss_location=location.as_dict(),
        output_gaps={"missing": 2, "gaps": [], "gap_count": 1},
    )
    rows = [r.as_dict() for r in delivery_rows(recs)]
    assert len(rows) == 1 and rows[0]["pass"] is False
    assert rows[0]["measured"] == (
        "burst: 7 lost (3 still stored, never fired, 2 output offset holes, 2 unexplained)"
    )
    assert "2 lost are holes" in rows[0]["note"]
    assert delivery_rows([]) == []


def test_locate_loss_queries_the_run_prefix() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def sql(statement: str, params: dict[str, Any]) -> list[Any]:
        calls.append((statement, params))
        return [(2,)] if "count" in statement else [("abc-4",), ("abc-9",)]

    loc = locate_loss(5, sql, "abc", {"missing": 1})
    assert (loc.lost, loc.still_stored, loc.output_holes, loc.unexplained) == (5, 2, 1, 2)
    assert loc.stored_sample == ["abc-4", "abc-9"]
    assert all(p == {"prefix": "abc-"} for _, p in calls) and len(calls) == 2

    def broken(statement: str, params: dict[str, Any]) -> list[Any]:
        raise RuntimeError("database gone")

    gone = locate_loss(5, broken, "abc", None)
    assert gone.still_stored is None and gone.output_holes is None and gone.unexplained is None
