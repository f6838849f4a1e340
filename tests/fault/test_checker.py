"""The delivery checker on synthetic records (no services): it must see every kind of failure
the fault suite relies on it to see."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from chronos.protocol import DEAD_LETTER_REASON_HEADER, DEADLINE_HEADER, MESSAGE_ID_HEADER
from tests.support.checker import (
    TRACKING_HEADER,
    Expectation,
    LateStats,
    Observation,
    ScenarioResult,
    analyse,
    raw,
    record_result,
    render_table,
    scheduled,
)

ADVANCE = 50


def fired(track: str, at_ms: int, *, dead: bool = False, reason: str | None = None) -> Observation:
    headers: list[tuple[str, bytes | None]] = [(TRACKING_HEADER, track.encode())]
    if reason is not None:
        headers.append((DEAD_LETTER_REASON_HEADER, reason.encode()))
    return Observation("dlq" if dead else "out", 0, 0, at_ms, b"k", b"v", headers, dead)


def sent(**deadlines: int) -> dict[str, Expectation]:
    return {track: Expectation(deadline) for track, deadline in deadlines.items()}


def test_a_clean_run_is_ok() -> None:
    report = analyse(sent(a=1000, b=2000), [fired("a", 960), fired("b", 2010)], advance_ms=ADVANCE)
    assert report.ok
    assert (report.sent, report.received) == (2, 2)
    assert report.lost == [] and report.duplicated == {} and report.early == {}
    assert report.fired_at == {"a": 960, "b": 2010}


def test_lost_messages_are_named() -> None:
    report = analyse(sent(a=1000, b=2000, c=3000), [fired("b", 2000)], advance_ms=ADVANCE)
    assert report.lost == ["a", "c"]
    assert not report.ok


def test_duplicates_are_counted_per_message_and_in_surplus_copies() -> None:
    observations = [fired("a", 1000), fired("a", 1001), fired("a", 1500), fired("b", 2000)]
    report = analyse(sent(a=1000, b=2000), observations, advance_ms=ADVANCE)
    assert report.duplicated == {"a": 3}
    assert report.duplicates == 2
    assert report.ok  # duplicates are judged by each scenario, not by `ok`
    assert report.fired_at["a"] == 1000  # the first copy


def test_early_is_deadline_minus_advance_with_one_millisecond_of_truncation() -> None:
    observations = [fired("on_time", 950), fired("one_ms", 949), fired("two_ms", 948)]
    report = analyse(sent(on_time=1000, one_ms=1000, two_ms=1000), observations, advance_ms=ADVANCE)
    assert report.early == {"two_ms": 2}
    assert not report.ok


def test_every_copy_is_checked_for_earliness() -> None:
    report = analyse(sent(a=1000), [fired("a", 1000), fired("a", 500)], advance_ms=ADVANCE)
    assert report.early == {"a": 450}


def test_producer_clock_skew_is_removed_from_timestamps() -> None:
    skew = 600_000  # the node's clock was 10 minutes ahead
    report = analyse(
        sent(a=1000), [fired("a", 1000 + skew)], advance_ms=ADVANCE, timestamp_skew_ms=skew
    )
    assert report.ok and report.fired_at == {"a": 1000}
    behind = analyse(
        sent(a=1000), [fired("a", 1000 - skew)], advance_ms=ADVANCE, timestamp_skew_ms=-skew
    )
    assert behind.ok
    unskewed = analyse(sent(a=1000), [fired("a", 1000 - skew)], advance_ms=ADVANCE)
    assert unskewed.early == {"a": skew - ADVANCE}


def test_dead_letters_are_matched_to_expectations_with_their_reason() -> None:
    expected = {
        "bad": Expectation(None, dead_letter=True),
        "good": Expectation(1000),
        "refused": Expectation(1000),
        "slipped": Expectation(None, dead_letter=True),
    }
    observations = [
        fired("bad", 10, dead=True, reason="missing header chronosDeadline"),
        fired("good", 1000),
        fired("refused", 3000, dead=True, reason="too large"),
        fired("slipped", 10),
    ]
    report = analyse(expected, observations, advance_ms=ADVANCE)
    assert report.dead_lettered == {
        "bad": "missing header chronosDeadline",
        "refused": "too large",
    }
    assert report.misrouted == ["refused", "slipped"]
    assert report.lost == []
    assert not report.ok


def test_records_of_other_tests_or_untracked_are_unknown() -> None:
    untracked = Observation("out", 0, 1, 1000, None, None, [], False)
    report = analyse(sent(a=1000), [fired("a", 1000), fired("zzz", 1000), untracked], advance_ms=0)
    assert report.unknown == 2
    assert report.received == 3
    assert report.ok


def test_late_statistics() -> None:
    stats = LateStats.of([float(v) for v in range(1, 101)])
    assert (stats.count, stats.p50, stats.p99, stats.max) == (100, 50, 99, 100)
    assert LateStats.of([]) == LateStats()
    report = analyse(sent(a=1000, b=1000), [fired("a", 1010), fired("b", 1030)], advance_ms=0)
    assert report.late.max == 30 and report.late.count == 2


def test_scheduled_messages_carry_the_tracking_header_and_a_millisecond_deadline() -> None:
    deadline = datetime(2030, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
    message = scheduled(deadline, track="t-1", key=None, value=b"v")
    names = [n for n, _ in message.headers]
    assert names == [MESSAGE_ID_HEADER, DEADLINE_HEADER, TRACKING_HEADER]
    assert dict(message.headers)[DEADLINE_HEADER] == b"2030-01-02T03:04:05.678Z"
    assert message.expectation == Expectation(round(deadline.timestamp() * 1000) - 1)
    assert message.relayed_headers == [(TRACKING_HEADER, b"t-1")]
    bad = raw([(MESSAGE_ID_HEADER, b"x")], dead_letter=True, track="t-2")
    assert bad.headers[-1] == (TRACKING_HEADER, b"t-2") and bad.expectation.dead_letter


def test_results_render_as_the_readme_table(tmp_path: Path) -> None:
    report = analyse(sent(a=1000, b=1000), [fired("a", 1000), fired("a", 1000)], advance_ms=0)
    path = record_result(
        ScenarioResult.of("02-kill", "SIGKILL after claim", report, 3.456), tmp_path
    )
    assert json.loads(path.read_text())["lost"] == 1
    table = render_table(tmp_path)
    assert table.splitlines()[0].startswith("| scenario | fault | messages sent |")
    assert "| 02-kill | SIGKILL after claim | 2 | 1 | 1 | 0 | 3.5 s |" in table
