"""The benchmark's verdicts on canned records: every target met, each target missed alone, the
capacity ratio, loss attributed to output offset holes, and the precision notes."""

from __future__ import annotations

import copy
from typing import Any

from loadtest.bench import evaluation
from loadtest.bench.records import BenchRecord
from tests.loadtest.canned import scenario_record, target_rows

Bench = dict[str, Any]


def test_evaluate_all_pass(canned_bench: Bench) -> None:
    rows = target_rows(canned_bench)
    verdicts = [r["pass"] for r in rows if r["scenario"] != "ceiling"]
    assert verdicts and all(v is True for v in verdicts), rows
    ratio = next(r for r in rows if r["target"].startswith("saturation"))
    assert ratio["scenario"] == "saturate" and "0.74" in ratio["measured"]
    assert evaluation.capacity(BenchRecord.from_dict(canned_bench)) == (18_500.0, "saturate")


def _failing(bench: Bench, mutate: Any) -> list[dict[str, Any]]:
    """The rows that fail once ``mutate`` changed a copy of ``bench``'s records (by name)."""
    data = copy.deepcopy(bench)
    mutate({r["name"]: r for r in data["scenarios"]})
    return [r for r in target_rows(data) if r["pass"] is False]


def test_evaluate_failures(canned_bench: Bench) -> None:
    def slow(s: dict[str, Any]) -> None:
        s["sustained"]["steady"]["fired_per_s"] = 9_700.0

    assert [r["scenario"] for r in _failing(canned_bench, slow)] == ["sustained"]

    def grew(s: dict[str, Any]) -> None:
        s["sustained2"]["backlog"]["growing"] = True

    assert [r["scenario"] for r in _failing(canned_bench, grew)] == ["sustained2"]

    def imprecise(s: dict[str, Any]) -> None:
        s["precision"]["summary"]["lateness_ms"].update(p99=12.0, p99_9=40.0)
        s["precision"]["summary"]["early"]["early_count"] = 3

    failed = _failing(canned_bench, imprecise)
    assert len(failed) == 3 and {r["scenario"] for r in failed} == {"precision"}

    def low_capacity(s: dict[str, Any]) -> None:
        s["saturate"]["steady"]["fired_per_s"] = 12_000.0  # 0.48 x 25,000

    assert [r["target"].split(" (")[0] for r in _failing(canned_bench, low_capacity)] == [
        "saturation: node drain rate >= 0.5 x the ceiling of the same run"
    ]

    def slow_drain(s: dict[str, Any]) -> None:
        s["burst"]["drain"]["rate_per_s"] = 8_000.0

    assert [r["scenario"] for r in _failing(canned_bench, slow_drain)] == ["burst"]

    def slow_claims(s: dict[str, Any]) -> None:
        s["backlog-10m"]["claim"]["mean_ms"] = 9.0

    assert [r["target"] for r in _failing(canned_bench, slow_claims)] == [
        "claim latency with 10,000,000 rows matches backlog-10k"
    ]

    def less_precise(s: dict[str, Any]) -> None:
        s["backlog-10m"]["summary"]["lateness_ms"]["p99"] = 9.5  # baseline 4.0: +5.5 ms

    assert [r["target"].split(" (")[0] for r in _failing(canned_bench, less_precise)] == [
        "precision with 10,000,000 rows matches backlog-10k"
    ]

    def fat(s: dict[str, Any]) -> None:
        s["backlog-10m"]["rss_max_mb"] = 350.0

    assert {r["scenario"] for r in _failing(canned_bench, fat)} == {"backlog-10m", "all"}

    def lossy(s: dict[str, Any]) -> None:
        s["precision"]["summary"]["counts"]["lost"] = 2

    assert {r["scenario"] for r in _failing(canned_bench, lossy)} == {"precision", "all"}

    def crashed(s: dict[str, Any]) -> None:
        s["burst"].update(status="failed", error="node exited")

    failed = _failing(canned_bench, crashed)
    assert [(r["scenario"], r["measured"]) for r in failed] == [("burst", "node exited")]


def test_ratio_without_saturate_is_a_lower_bound(canned_bench: Bench) -> None:
    data = canned_bench
    data["scenarios"] = [r for r in data["scenarios"] if r["kind"] != "saturate"]
    ratio = next(r for r in target_rows(data) if r["target"].startswith("saturation"))
    assert ratio["scenario"] == "sustained" and ratio["pass"] is None  # 0.40: not shown
    data["scenarios"][0]["result"]["ceiling_msg_per_s"] = 12_000.0
    ratio = next(r for r in target_rows(data) if r["target"].startswith("saturation"))
    assert ratio["pass"] is True  # even the offered-limited rate clears 0.5 x


def test_loss_attributed_to_offset_holes(canned_bench: Bench) -> None:
    data = canned_bench
    rec = next(r for r in data["scenarios"] if r["name"] == "sustained2")
    rec["summary"]["counts"]["lost"] = 361
    rec["output_gaps"] = {"missing": 361, "gaps": [], "gap_count": 2}
    row = next(r for r in target_rows(data) if r["target"].startswith("no message lost"))
    assert row["pass"] is False and row["measured"] == "sustained2: 361 lost"
    assert "361 lost are holes" in row["note"]


def test_precision_notes_blame_the_stack_when_the_relay_misses_too(canned_bench: Bench) -> None:
    data = canned_bench
    recs = {r["name"]: r for r in data["scenarios"]}
    recs["precision"]["summary"]["lateness_ms"].update(p99=6_000.0, p99_9=6_900.0)
    recs["precision"]["node_counters"] = {"published_directly": 15_786}
    relay = scenario_record("relay", "relay")
    relay["summary"]["lateness_ms"].update(p99=15_051.0, p99_9=16_000.0)
    data["scenarios"].insert(4, relay)
    rows = target_rows(data)
    floor = next(r for r in rows if r["scenario"] == "relay")
    assert floor["pass"] is None and "15,051.0" in floor["measured"]
    p99 = next(r for r in rows if r["scenario"] == "precision" and "p99 " in r["target"])
    assert p99["pass"] is False
    assert p99["note"] == (
        "15,786 messages reached Chronos after their deadline; "
        "the stack without Chronos: 15,051.0 ms"
    )


def test_an_intake_record_missing_from_the_table_is_a_loss(canned_bench: Bench) -> None:
    """The intake scenario's own load is stored, never fired: one record missing from the table
    fails the loss verdict as a lost fired message does."""
    intake = scenario_record("intake", "intake")
    intake["background"] = {"sent": 90_000, "stored": 90_000}
    canned_bench["scenarios"].append(intake)

    def row(data: Bench) -> dict[str, Any]:
        rows = target_rows(data)
        return next(r for r in rows if r["scenario"] == "intake" and "lost" in r["target"])

    whole = row(canned_bench)
    assert whole["pass"] is True and "90,000 of 90,000 stored" in whole["measured"], whole
    intake["background"]["stored"] = 89_999
    short = row(canned_bench)
    assert short["pass"] is False and "89,999 of 90,000 stored" in short["measured"], short
