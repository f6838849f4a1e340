"""Recurring messages' rules: durations, the headers that describe a series, occurrences of a
period (no drift) and of a cron expression in a daylight-saving zone (fixed clocks), and what a
series does with the occurrences it missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from chronos.protocol import Rejection, ScheduledMessage, parse_record
from chronos.recurrence import (
    Missed,
    RecurrenceError,
    Rule,
    decode,
    make_rule,
    parse_duration_ms,
)

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
NOW = datetime(2026, 6, 1, 12, 0, 0, 250_000, tzinfo=UTC)


def _utc(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    *,
    zone: ZoneInfo = PARIS,
    fold: int = 0,
) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=zone, fold=fold).astimezone(UTC)


def _series(rule: Rule, start: datetime, count: int, *, exact: bool = True) -> list[datetime]:
    out = [rule.first(start, exact=exact)]
    while len(out) < count:
        following = rule.after(out[-1])
        assert following is not None
        out.append(following)
    return out


# ------------------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT2S", 2_000),
        ("PT5M", 300_000),
        ("P1D", 86_400_000),
        ("PT1.5S", 1_500),
        ("pt0,25s", 250),
        ("P1W", 604_800_000),
        ("P1DT2H3M4.005S", 93_784_005),
    ],
)
def test_iso_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text, "chronosEvery") == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "5M", "PT5", "P1M", "P1Y", "PT1.0001S", "P1DT"])
def test_bad_durations_are_refused_naming_the_header(text: str) -> None:
    with pytest.raises(RecurrenceError, match="chronosEvery"):
        parse_duration_ms(text, "chronosEvery")


def test_months_are_refused_with_a_hint() -> None:
    with pytest.raises(RecurrenceError, match="use chronosCron"):
        parse_duration_ms("P1M", "chronosEvery")


# ------------------------------------------------------------------------------ the headers


def _parse(**headers: str) -> ScheduledMessage | Rejection:
    names = {
        "id": "chronosMessageId",
        "deadline": "chronosDeadline",
        "every": "chronosEvery",
        "cron": "chronosCron",
        "tz": "chronosTimeZone",
        "until": "chronosUntil",
        "missed": "chronosMissed",
        "expires": "chronosExpires",
        "action": "chronosAction",
    }
    pairs = [(names[k], v.encode()) for k, v in headers.items()]
    return parse_record(b"k", b"v", [*pairs, ("app", b"x")], now=NOW)


def test_every_without_a_deadline_starts_one_period_after_arrival() -> None:
    m = _parse(id="s", every="PT5M")
    assert isinstance(m, ScheduledMessage)
    assert m.deadline == NOW + timedelta(minutes=5)
    assert m.recurrence is not None
    assert decode(m.recurrence) == Rule(every_ms=300_000)
    assert m.headers == [("app", b"x")]  # the recurrence headers are Chronos's: not relayed


def test_every_with_a_deadline_starts_at_it() -> None:
    m = _parse(id="s", every="PT2S", deadline="2026-06-01T12:00:10.5Z")
    assert isinstance(m, ScheduledMessage)
    assert m.deadline == datetime(2026, 6, 1, 12, 0, 10, 500_000, tzinfo=UTC)


def test_cron_starts_at_its_first_occurrence_after_arrival_in_its_zone() -> None:
    m = _parse(id="s", cron="0 9 * * 1-5", tz="Europe/Paris")
    assert isinstance(m, ScheduledMessage)
    # 2026-06-01 is a Monday, 12:00 UTC = 14:00 Paris: the next weekday 9:00 is Tuesday's.
    assert m.deadline == _utc(2026, 6, 2, 9, 0)
    rule = decode(m.recurrence or "")
    assert (rule.cron, rule.zone) == ("0 9 * * 1-5", "Europe/Paris")


def test_cron_with_a_deadline_starts_at_the_first_occurrence_at_or_after_it() -> None:
    m = _parse(id="s", cron="*/15 * * * *", deadline="2026-06-01T13:15:00Z")
    assert isinstance(m, ScheduledMessage) and m.deadline == datetime(
        2026, 6, 1, 13, 15, tzinfo=UTC
    )
    m = _parse(id="s", cron="*/15 * * * *", deadline="2026-06-01T13:15:01Z")
    assert isinstance(m, ScheduledMessage) and m.deadline == datetime(
        2026, 6, 1, 13, 30, tzinfo=UTC
    )


def test_until_and_missed_are_stored_with_the_rule() -> None:
    m = _parse(id="s", every="PT1M", until="2026-06-01T13:00:00Z", missed="ALL")
    assert isinstance(m, ScheduledMessage)
    rule = decode(m.recurrence or "")
    assert rule.until == datetime(2026, 6, 1, 13, tzinfo=UTC)
    assert rule.missed is Missed.ALL
    assert "until 2026-06-01T13:00:00+00:00" in rule.describe()


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({"every": "PT0.5S"}, "shorter than 1 s"),
        ({"every": "P1M"}, "use chronosCron"),
        ({"every": "PT1M", "cron": "* * * * *"}, "exclude each other"),
        ({"cron": "* * * *"}, "has 4 fields"),
        ({"cron": "0 0 * * * *"}, "has 6 fields"),
        ({"cron": "61 * * * *"}, "is not valid"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "not an IANA time zone"),
        ({"every": "PT1M", "tz": "Europe/Paris"}, "applies to chronosCron only"),
        ({"deadline": "2026-06-02T00:00:00Z", "until": "2026-06-03T00:00:00Z"}, "needs"),
        ({"every": "PT1M", "until": "2026-06-01T11:00:00Z"}, "before the first occurrence"),
        ({"every": "PT1M", "until": "yesterday"}, "chronosUntil"),
        ({"every": "PT1M", "missed": "some"}, "not one of latest, all"),
    ],
)
def test_bad_recurrence_headers_are_dead_lettered_with_a_reason(
    headers: dict[str, str], fragment: str
) -> None:
    r = _parse(id="s", **headers)
    assert isinstance(r, Rejection), r
    assert r.code == "invalid_recurrence"
    assert fragment in r.reason


def test_a_cancel_ignores_recurrence_headers() -> None:
    m = _parse(id="s", action="cancel", every="nonsense")
    assert isinstance(m, ScheduledMessage) and m.recurrence is None


def test_duplicate_recurrence_headers_are_refused() -> None:
    r = parse_record(
        None,
        None,
        [("chronosMessageId", b"s"), ("chronosEvery", b"PT1M"), ("chronosEvery", b"PT2M")],
        now=NOW,
    )
    assert isinstance(r, Rejection) and r.code == "duplicate_header"


# ------------------------------------------------------------------------------ expiry header


def test_expires_as_a_duration_or_an_instant_after_the_deadline() -> None:
    m = _parse(id="a", deadline="2026-06-01T13:00:00Z", expires="PT30S")
    assert isinstance(m, ScheduledMessage) and m.expires_ms == 30_000
    m = _parse(id="b", deadline="2026-06-01T13:00:00Z", expires="2026-06-01T13:00:02.5Z")
    assert isinstance(m, ScheduledMessage) and m.expires_ms == 2_500
    m = _parse(id="c", every="PT1M", expires="PT10S")
    assert isinstance(m, ScheduledMessage) and m.expires_ms == 10_000
    m = _parse(id="d", deadline="2026-06-01T13:00:00Z", expires="PT2147483.647S")
    assert isinstance(m, ScheduledMessage) and m.expires_ms == 2**31 - 1  # the longest


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({"deadline": "2026-06-01T13:00:00Z", "expires": "2026-06-01T12:59:00Z"}, "not after"),
        ({"deadline": "2026-06-01T13:00:00Z", "expires": "soon"}, "neither an ISO-8601"),
        ({"every": "PT1M", "expires": "2026-06-01T13:00:00Z"}, "is a duration"),
        ({"deadline": "2026-06-01T13:00:00Z", "expires": ""}, "is empty"),
        # the stored column holds 2**31 - 1 ms: a longer expiry would be refused by Postgres
        ({"deadline": "2026-06-01T13:00:00Z", "expires": "P30D"}, "at most PT2147483.647S"),
        ({"deadline": "2026-06-01T13:00:00Z", "expires": "2026-07-01T13:00:00Z"}, "at most"),
    ],
)
def test_bad_expiry_is_dead_lettered(headers: dict[str, str], fragment: str) -> None:
    r = _parse(id="s", **headers)
    assert isinstance(r, Rejection) and r.code == "invalid_expires", r
    assert fragment in r.reason


# ------------------------------------------------------------------------------ periods


def test_a_period_never_drifts_from_its_schedule() -> None:
    rule = Rule(every_ms=1_234)
    start = datetime(2026, 6, 1, 12, 0, 0, 1, tzinfo=UTC)
    occurrences = _series(rule, start, 10_001)
    assert occurrences[-1] == start + timedelta(milliseconds=1_234 * 10_000)


def test_plan_on_time_fires_the_occurrence_and_names_the_next() -> None:
    rule = Rule(every_ms=60_000)
    due = NOW.timestamp()
    plan = rule.plan(due, due - 0.2)  # claimed 200 ms ahead
    assert (plan.fire, plan.skipped, plan.next) == (due, 0, due + 60)


def test_missed_latest_fires_the_latest_missed_occurrence_and_counts_the_others() -> None:
    rule = Rule(every_ms=60_000)
    due = NOW.timestamp()
    plan = rule.plan(due, due + 10 * 60 + 30)  # ten and a half periods late
    assert plan.fire == due + 600
    assert plan.skipped == 10
    assert plan.next == due + 660


def test_missed_all_fires_every_occurrence_in_turn() -> None:
    rule = Rule(every_ms=60_000, missed=Missed.ALL)
    due = NOW.timestamp()
    plan = rule.plan(due, due + 630)
    assert (plan.fire, plan.skipped, plan.next) == (due, 0, due + 60)


def test_until_ends_the_series_and_bounds_the_catch_up() -> None:
    until = NOW + timedelta(minutes=3)
    rule = Rule(every_ms=60_000, until=until)
    assert _series(rule, NOW, 4)[-1] == until
    assert rule.after(until) is None
    plan = rule.plan(NOW.timestamp(), NOW.timestamp() + 3600)  # down an hour, past until
    assert plan.fire == until.timestamp()
    assert (plan.skipped, plan.next) == (3, None)


def test_one_period_late_is_not_a_missed_occurrence() -> None:
    rule = Rule(every_ms=1_000)
    due = NOW.timestamp()
    plan = rule.plan(due, due + 0.999)
    assert (plan.fire, plan.skipped, plan.next) == (due, 0, due + 1)


# ------------------------------------------------------------------------------ cron and DST


def test_weekdays_at_nine_paris_keep_nine_across_the_spring_change() -> None:
    rule = make_rule(None, "0 9 * * 1-5", "Europe/Paris", None, None)
    assert rule is not None
    got = _series(rule, _utc(2026, 3, 26, 12, 0), 4, exact=False)
    assert got == [
        _utc(2026, 3, 27, 9, 0),  # Friday, UTC+1: 08:00 UTC
        _utc(2026, 3, 30, 9, 0),  # Monday after the change, UTC+2: 07:00 UTC
        _utc(2026, 3, 31, 9, 0),
        _utc(2026, 4, 1, 9, 0),
    ]
    assert got[0].hour == 8 and got[1].hour == 7


def test_an_occurrence_in_the_skipped_hour_fires_at_the_first_instant_after_it() -> None:
    # Paris 2026-03-29: 02:00 jumps to 03:00; 02:30 does not exist that day.
    rule = Rule(cron="30 2 * * *", zone="Europe/Paris")
    got = _series(rule, _utc(2026, 3, 28, 12, 0), 3, exact=False)
    assert got == [_utc(2026, 3, 29, 3, 0), _utc(2026, 3, 30, 2, 30), _utc(2026, 3, 31, 2, 30)]


def test_an_occurrence_in_the_repeated_hour_fires_once() -> None:
    # Paris 2026-10-25: 03:00 goes back to 02:00; 02:30 happens twice, fires the first time.
    rule = Rule(cron="30 2 * * *", zone="Europe/Paris")
    got = _series(rule, _utc(2026, 10, 24, 12, 0), 3, exact=False)
    assert got == [
        _utc(2026, 10, 25, 2, 30, fold=0),  # 00:30 UTC (summer time)
        _utc(2026, 10, 26, 2, 30),
        _utc(2026, 10, 27, 2, 30),
    ]
    assert got[0] == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)


def test_new_york_transitions_too() -> None:
    rule = Rule(cron="30 2 * * *", zone="America/New_York")
    spring = _series(rule, _utc(2026, 3, 7, 12, 0, zone=NEW_YORK), 2, exact=False)
    assert spring == [_utc(2026, 3, 8, 3, 0, zone=NEW_YORK), _utc(2026, 3, 9, 2, 30, zone=NEW_YORK)]
    fall = _series(rule, _utc(2026, 10, 31, 12, 0, zone=NEW_YORK), 2, exact=False)
    assert fall == [
        _utc(2026, 11, 1, 2, 30, zone=NEW_YORK),
        _utc(2026, 11, 2, 2, 30, zone=NEW_YORK),
    ]


def test_a_real_time_cron_follows_real_time_through_both_changes() -> None:
    rule = Rule(cron="*/30 * * * *", zone="Europe/Paris")
    spring = _series(rule, _utc(2026, 3, 29, 1, 0), 4, exact=False)
    assert [s - spring[0] for s in spring] == [timedelta(minutes=30 * i) for i in range(4)]
    fall = _series(rule, _utc(2026, 10, 25, 1, 50), 6, exact=False)
    assert [f - fall[0] for f in fall] == [timedelta(minutes=30 * i) for i in range(6)]


def test_cron_catch_up_fires_the_latest_missed_occurrence_across_a_change() -> None:
    rule = Rule(cron="0 * * * *", zone="Europe/Paris")
    due = _utc(2026, 3, 29, 0, 0)  # midnight; the node comes back at 05:20 (02:00 skipped)
    plan = rule.plan(due.timestamp(), _utc(2026, 3, 29, 5, 20).timestamp())
    assert plan.fire == _utc(2026, 3, 29, 5, 0).timestamp()
    assert plan.skipped == 4  # 00:00, 01:00, 03:00, 04:00 (02:00 never existed)
    assert plan.next == _utc(2026, 3, 29, 6, 0).timestamp()


def test_the_stored_rule_round_trips() -> None:
    for rule in (
        Rule(every_ms=1_500),
        Rule(cron="0 9 * * 1-5", zone="Europe/Paris", until=NOW, missed=Missed.ALL),
        Rule(cron="* * * * *"),
    ):
        assert decode(rule.encode()) == rule


# ------------------------------------------------------------------------- never before the start


def test_a_fixed_time_cron_created_in_the_repeated_hour_waits_for_the_next_day() -> None:
    # New York 2026-11-01: 02:00 EDT goes back to 01:00 EST. 01:30 fired once, at 01:30 EDT
    # (05:30 UTC); a series created at 01:10 EST (06:10 UTC) starts the next day, as cron does.
    rule = Rule(cron="30 1 * * *", zone="America/New_York")
    start = _utc(2026, 11, 1, 1, 10, zone=NEW_YORK, fold=1)
    assert start == datetime(2026, 11, 1, 6, 10, tzinfo=UTC)
    following = _utc(2026, 11, 2, 1, 30, zone=NEW_YORK)
    assert rule.first(start, exact=False) == following
    assert rule.first(start, exact=True) == following


def test_a_sub_second_deadline_never_starts_a_cron_series_before_it() -> None:
    start = datetime(2026, 6, 1, 10, 0, 0, 500_000, tzinfo=UTC)
    assert Rule(cron="0 10 * * *").first(start, exact=True) == datetime(
        2026, 6, 2, 10, 0, tzinfo=UTC
    )
    assert Rule(cron="* * * * *").first(start, exact=True) == datetime(
        2026, 6, 1, 10, 1, tzinfo=UTC
    )
    on_the_second = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
    assert Rule(cron="0 10 * * *").first(on_the_second, exact=True) == on_the_second


def test_the_skip_count_across_the_fall_back_hour_counts_each_occurrence_once() -> None:
    rule = Rule(cron="*/30 * * * *", zone="America/New_York")
    due = _utc(2026, 11, 1, 1, 0, zone=NEW_YORK, fold=1)  # 01:00 EST, the second 01:00
    plan = rule.plan(due.timestamp(), _utc(2026, 11, 1, 2, 10, zone=NEW_YORK).timestamp())
    assert plan.fire == _utc(2026, 11, 1, 2, 0, zone=NEW_YORK).timestamp()
    assert plan.skipped == 2  # 01:00 EST and 01:30 EST (not the EDT ones before the due)
    assert plan.next == _utc(2026, 11, 1, 2, 30, zone=NEW_YORK).timestamp()


def test_the_latest_missed_occurrence_in_the_repeated_hour_is_found() -> None:
    # Down from 00:00 EDT to 01:20 EST: the latest real-time occurrence is 01:00 EST, not EDT.
    every_half_hour = Rule(cron="*/30 * * * *", zone="America/New_York")
    due = _utc(2026, 11, 1, 0, 0, zone=NEW_YORK)
    back = _utc(2026, 11, 1, 1, 20, zone=NEW_YORK, fold=1)
    plan = every_half_hour.plan(due.timestamp(), back.timestamp())
    assert plan.fire == _utc(2026, 11, 1, 1, 0, zone=NEW_YORK, fold=1).timestamp()
    assert plan.skipped == 4  # 00:00, 00:30, 01:00 and 01:30 EDT
    # A fixed-time job's occurrence of the day (01:30 EDT) passed before 01:20 EST.
    daily = Rule(cron="30 1 * * *", zone="America/New_York")
    yesterday = _utc(2026, 10, 31, 1, 30, zone=NEW_YORK)
    plan = daily.plan(yesterday.timestamp(), back.timestamp())
    assert plan.fire == _utc(2026, 11, 1, 1, 30, zone=NEW_YORK).timestamp()
    assert (plan.skipped, plan.next) == (1, _utc(2026, 11, 2, 1, 30, zone=NEW_YORK).timestamp())


# ------------------------------------------------------------------------------ far-past series


def test_a_cron_series_a_year_behind_is_planned_at_once_with_its_skips_estimated() -> None:
    rule = Rule(cron="*/1 * * * *")
    now = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    due = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    plan = rule.plan(due.timestamp(), now.timestamp())
    assert plan.fire == datetime(2026, 6, 1, 12, 0, tzinfo=UTC).timestamp()
    assert plan.next == datetime(2026, 6, 1, 12, 1, tzinfo=UTC).timestamp()
    assert plan.skipped == 365 * 24 * 60  # every minute of the year but the one fired
    assert plan.estimated  # more than COUNT_LIMIT: counted that far, the rest from the period


def test_skips_are_counted_exactly_up_to_the_limit() -> None:
    rule = Rule(cron="0 9 * * 1-5", zone="Europe/Paris")
    due = _utc(2026, 3, 2, 9, 0)  # a Monday
    now = _utc(2026, 3, 30, 10, 0)  # four weeks later, across the spring change
    plan = rule.plan(due.timestamp(), now.timestamp())
    assert plan.fire == _utc(2026, 3, 30, 9, 0).timestamp()
    assert (plan.skipped, plan.estimated) == (20, False)
    few = rule.plan(due.timestamp(), now.timestamp(), count_limit=5)
    assert (few.fire, few.next) == (plan.fire, plan.next)
    assert few.estimated and 15 <= few.skipped <= 25, few.skipped  # 5 counted, the rest estimated
    none = rule.plan(due.timestamp(), now.timestamp(), count_limit=0)
    assert none.estimated and none.skipped >= 1
