from __future__ import annotations

import random

import pytest

from loadtest.harness.delays import (
    BurstDelay,
    DelaySpecError,
    FixedDelay,
    UniformDelay,
    parse_delay,
)
from loadtest.harness.timeutil import DurationError, parse_duration_ms


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("fixed:3s", FixedDelay(3000)),
        ("fixed:500ms", FixedDelay(500)),
        ("fixed:1.5s", FixedDelay(1500)),
        ("fixed:0s", FixedDelay(0)),
        ("fixed:2m", FixedDelay(120_000)),
        ("fixed:7", FixedDelay(7000)),
        (" FIXED: 3s ", FixedDelay(3000)),
        ("uniform:3s-10s", UniformDelay(3000, 10_000)),
        ("uniform:3-10", UniformDelay(3000, 10_000)),
        ("uniform:250ms-1.5s", UniformDelay(250, 1500)),
        ("uniform:2s-2s", UniformDelay(2000, 2000)),
        ("burst:20s", BurstDelay(20_000)),
        ("burst:1h", BurstDelay(3_600_000)),
    ],
)
def test_parse_good_specs(spec: str, expected: object) -> None:
    assert parse_delay(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "missing ':<value>'"),
        ("fixed", "missing ':<value>'"),
        ("fixed:", "missing ':<value>'"),
        ("fixed:abc", "invalid duration 'abc'"),
        ("fixed:-3s", "invalid duration '-3s'"),
        ("fixed:3x", "invalid duration '3x'"),
        ("fixed:3 s s", "invalid duration"),
        ("uniform:3s", "uniform needs <min>-<max>"),
        ("uniform:3s-", "uniform needs <min>-<max>"),
        ("uniform:10s-3s", "minimum 10000 ms exceeds maximum 3000 ms"),
        ("gaussian:3s", "unknown kind 'gaussian'"),
        ("burst:soon", "invalid duration 'soon'"),
    ],
)
def test_parse_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(DelaySpecError) as info:
        parse_delay(spec)
    assert message in str(info.value)
    assert repr(spec) in str(info.value)


@pytest.mark.parametrize("spec", ["fixed:3s", "fixed:250ms", "uniform:3s-10s", "burst:20s"])
def test_describe_round_trips(spec: str) -> None:
    parsed = parse_delay(spec)
    assert parsed.describe() == spec
    assert parse_delay(parsed.describe()) == parsed


def test_deadlines() -> None:
    rng = random.Random(7)
    assert FixedDelay(3000).deadline_ms(1_000, 0, rng) == 4_000
    assert BurstDelay(20_000).deadline_ms(5_555, 1_000, rng) == 21_000
    draws = {UniformDelay(10, 12).deadline_ms(100, 0, rng) for _ in range(2_000)}
    assert draws == {110, 111, 112}  # both ends included, whole milliseconds


@pytest.mark.parametrize(
    ("text", "ms"), [("500ms", 500), ("3s", 3000), ("0.25s", 250), ("1.5m", 90_000), ("2", 2000)]
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "s", "-1s", "1d", "1e3s", "nan"])
def test_parse_duration_errors(text: str) -> None:
    with pytest.raises(DurationError, match="invalid duration"):
        parse_duration_ms(text)
