"""The soak's load without a broker: its duration option, the delay mix scaled to the run, the
mix planner's records (follow-ups, tracking numbers, series) and the recorder's numbering of a
series' occurrences."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from loadtest.cli import build_parser
from loadtest.harness import headers as h
from loadtest.harness import mix as mixing
from loadtest.harness.consumer import OutputRecorder
from loadtest.harness.delays import DelaySpecError, MixDelay, UniformDelay, parse_delay
from loadtest.harness.mix import Mix, MixPlanner
from loadtest.harness.timeutil import DeadlineFormatter, format_ms, parse_instant_ms
from loadtest.soak.driver import soak_duration
from loadtest.soak.load import SoakLoad, delay_mix, series_every_s
from tests.loadtest.test_loadtest_recorder import FakeMessage


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("4m", 240.0), ("90s", 90.0), ("1h", 3600.0), ("1.5h", 5400.0), ("500ms", 0.5), ("75", 75.0)],
)
def test_soak_duration(text: str, seconds: float) -> None:
    assert soak_duration(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "-1m", "1d", "soon", ""])
def test_soak_duration_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        soak_duration(text)


def test_the_command_line_defaults() -> None:
    args = build_parser().parse_args(["soak"])
    assert (args.duration, args.rate, args.interval, args.nodes) == (3600.0, 10_000.0, 10.0, 2)
    assert args.master == "local[*]" and args.out is None and args.analyze is None
    args = build_parser().parse_args(
        ["soak", "--duration", "4m", "--rate", "2000", "--output", "/tmp/x"]
    )
    assert (args.duration, args.rate, args.out) == (240.0, 2000.0, Path("/tmp/x"))


def test_mix_delay_parses_back() -> None:
    spec = "mix:70%1s-60s,20%1m-10m,10%10m-1h"
    d = parse_delay(spec)
    assert isinstance(d, MixDelay)
    assert d.parts[1] == (20.0, UniformDelay(60_000, 600_000))
    assert parse_delay(d.describe()) == d
    assert d.high_ms == 3_600_000
    assert d.mean_ms() == pytest.approx(0.7 * 30_500 + 0.2 * 330_000 + 0.1 * 2_100_000)
    rng = random.Random(3)
    delays = [d.deadline_ms(1000, 0, rng) - 1000 for _ in range(20_000)]
    assert min(delays) >= 1000 and max(delays) <= 3_600_000
    assert sum(x <= 60_000 for x in delays) / len(delays) == pytest.approx(0.7, abs=0.02)


@pytest.mark.parametrize("spec", ["mix:", "mix:70%", "mix:0%1s-2s", "mix:x%1s-2s", "mix:5%3s-1s"])
def test_mix_delay_refuses(spec: str) -> None:
    with pytest.raises(DelaySpecError):
        parse_delay(spec)


def test_the_delays_scale_with_a_short_run() -> None:
    hour = SoakLoad.of(10_000, 3600)
    assert hour.delay.describe() == "mix:70%1s-60s,20%60s-600s,10%600s-3600s"
    assert not hour.scaled and hour.mix.series_every_ms == 60_000
    assert hour.standing_backlog() == pytest.approx(10_000 / 1.1 * 297.35, rel=0.001)
    four = SoakLoad.of(2000, 240)
    assert four.scaled and four.delay.describe() == "mix:70%1s-60s,20%60s-120s,10%120s-240s"
    assert four.mix.series_every_ms == 12_000
    short = SoakLoad.of(200, 75)
    assert short.delay.high_ms == 75_000 and series_every_s(75) == 3
    assert SoakLoad.of(10_000, 7200, max_delay_s=7200).delay.high_ms == 7_200_000
    assert SoakLoad.of(10_000, 3 * 3600).max_delay_s == 7200  # at most two hours by default
    with pytest.raises(ValueError):
        delay_mix(1.0)


def test_the_load_generator_reads_the_soaks_options() -> None:
    load = SoakLoad.of(2000, 240)
    args = build_parser().parse_args(["run", *load.harness_args()])
    assert args.rate == 2000 and args.duration == 240
    assert args.delay == load.delay
    assert mixing.from_args(args) == load.mix
    assert mixing.from_args(build_parser().parse_args(["run"])) is None


def _plan(mix: Mix, records: int, every_ms: int = 10) -> tuple[list[tuple[int, Any]], Any]:
    start = 1_700_000_000_000
    planner = MixPlanner(
        mix,
        parse_delay("uniform:2s-30s"),
        random.Random(7),
        run_id="r",
        start_ms=start,
        end_ms=start + records * every_ms,
        keys=100,
        fmt=DeadlineFormatter(),
    )
    out = [(start + i * every_ms, planner.next(start + i * every_ms)) for i in range(records)]
    now = start + records * every_ms
    out += [(now, p) for p in planner.leftovers(now)]
    return out, planner


def _headers(planned: Any) -> dict[str, Any]:
    return dict(planned.headers)


def test_the_planner_numbers_every_expected_fire_once() -> None:
    mix = Mix(cancel_share=0.2, reschedule_share=0.2, series_share=0.1, series_every_ms=2000,
              series_occurrences=3, tenants=4)  # fmt: skip
    records, planner = _plan(mix, 3000)
    c = planner.counts
    assert c.records == 3000 + c.followups_at_end
    assert min(c.one_shot, c.series, c.cancelled, c.rescheduled) > 0
    numbers: list[int] = []
    message_of: dict[str, tuple[int, Any]] = {}  # chronos id -> (sent at, its schedule)
    followups: list[tuple[str, str, str | None]] = []  # as the analysis reads them
    for at, planned in records:
        hs = _headers(planned)
        cid = hs[h.CHRONOS_MESSAGE_ID]
        action = hs.get(h.CHRONOS_ACTION)
        if action is None:
            message_of[cid] = (at, planned)
        else:  # a follow-up: same key and tenant as its message, before its deadline - margin
            first_at, first = message_of[cid]
            assert planned.key_ix == first.key_ix and planned.tenant_ix == first.tenant_ix
            deadline = int(_headers(first)[h.DEADLINE_MS])
            assert first_at < at <= deadline - mix.margin_ms
            tracking = int(_headers(first)[h.ID].removeprefix("r-"))
            assert tracking < 0 and tracking % 2 == (1 if action == "cancel" else 0)
            followups.append((cid, _headers(first)[h.ID], hs.get(h.ID)))
        if planned.deadlines:
            first_number = int(hs[h.ID].removeprefix("r-"))
            numbers += range(first_number, first_number + len(planned.deadlines))
            assert int(hs[h.DEADLINE_MS]) == planned.deadlines[0]
        if h.CHRONOS_EVERY in hs:
            assert hs[h.CHRONOS_EVERY] == "PT2S" and hs[h.EVERY_MS] == "2000"
            assert hs[h.CHRONOS_MISSED] == "all"
            assert planned.deadlines == [planned.deadlines[0] + k * 2000 for k in range(3)]
            until = parse_instant_ms(hs[h.CHRONOS_UNTIL])
            assert planned.deadlines[-1] < until < planned.deadlines[-1] + 2000
        if hs.get(h.CHRONOS_TENANT) is not None:
            assert hs[h.CHRONOS_TENANT] == hs[h.TENANT] == f"soak-{planned.tenant_ix:02d}".encode()
    assert numbers == list(range(planner.fires))  # consecutive, each once
    assert c.occurrences == 3 * c.series
    assert planner.fires == c.one_shot + c.occurrences + c.rescheduled
    # every follow-up recorded for the analysis: its message, the schedule it cancels or
    # replaces, and a reschedule's own fire
    assert planner.followups == followups and len(followups) == c.cancelled + c.rescheduled


def test_no_follow_up_after_the_last_slot() -> None:
    records, planner = _plan(Mix(cancel_share=0.5, reschedule_share=0.5, series_share=0), 500)
    assert planner.counts.followups_at_end == 0
    last = max(at for at, _ in records)
    cancels = [at for at, p in records if _headers(p).get(h.CHRONOS_ACTION)]
    assert cancels and max(cancels) <= last


def test_the_recorder_numbers_a_series_occurrences(tmp_path: Path) -> None:
    rec = OutputRecorder(bootstrap="127.0.0.1:1", output_topic="out", dead_letter_topic=None,
                         run_id="r", expected=2, out_dir=tmp_path)  # fmt: skip
    first = 1_700_000_000_000

    def occurrence(k: int, offset: int) -> FakeMessage:
        instant = format_ms(first + k * 3000).encode()
        headers = [(h.RUN, b"r"), (h.ID, b"r-5"), (h.DEADLINE_MS, str(first).encode()),
                   (h.EVERY_MS, b"3000"), (h.SCHEDULED_FOR, instant)]  # fmt: skip
        return FakeMessage("out", offset, headers, first + k * 3000 + 7)

    never = [(h.RUN, b"r"), (h.ID, b"r--3"), (h.DEADLINE_MS, b"10")]
    rec._record([occurrence(0, 1), occurrence(2, 2), occurrence(2, 3),
                 FakeMessage("out", 4, never, 20)], receive_ms=1)  # fmt: skip
    assert rec.stats.distinct_ids == 2 and rec.stats.output_duplicates == 1
    rec.stop()
    rows = pq.read_table(tmp_path / "received.parquet").to_pylist()
    assert [(r["id"], r["deadline_ms"] - first) for r in rows[:3]] == [
        ("r-5", 0),
        ("r-7", 6000),
        ("r-7", 6000),
    ]
    assert rows[3]["id"] == "r--3"
