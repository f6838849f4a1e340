from __future__ import annotations

from datetime import UTC, datetime

from loadtest.harness.progress import Snapshot, percentile_of, render
from loadtest.harness.timeutil import DeadlineFormatter, format_ms


def test_format_ms() -> None:
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"
    assert format_ms(1_669_892_941_123) == "2022-12-01T11:09:01.123Z"
    assert format_ms(1_669_892_941_007) == "2022-12-01T11:09:01.007Z"


def test_cached_formatter_matches_and_parses_back() -> None:
    fmt = DeadlineFormatter()
    for ms in [1_669_892_941_999, 1_669_892_942_000, 1_669_892_941_500, 1_700_000_000_001]:
        text = fmt(ms)
        assert text == format_ms(ms)
        parsed = datetime.fromisoformat(text)
        assert parsed.tzinfo == UTC
        assert int(parsed.timestamp() * 1000) == ms


def test_progress_line() -> None:
    assert percentile_of([], 0.99) is None
    assert percentile_of(list(range(101)), 0.99) == 99
    line = render(Snapshot(1.5, "sending", 10, 100, 7, 3, 12.0, 0, 0))
    assert "sent 10/100" in line and "received 7" in line and "in flight 3" in line
    assert "lateness p99 12 ms" in line
    assert "behind" not in line
    assert "behind 5" in render(Snapshot(1.5, "sending", 10, 100, 7, 3, None, 5, 0))
