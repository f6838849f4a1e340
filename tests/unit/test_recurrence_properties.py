"""Properties of a series' occurrences for random rules, zones and starts (most of them near a
daylight-saving change): no occurrence precedes the series' start, occurrences strictly increase,
and a claim that missed some fires the latest one due and counts the others as the series
itself lists them (brute force over a few dozen occurrences), exactly up to the count limit and
as an estimate beyond it."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from chronos.recurrence import Rule

# Each zone with its 2026 changes (UTC), where most starts are drawn.
CHANGES = {
    "UTC": [datetime(2026, 3, 8, 7, 0, tzinfo=UTC)],
    "Asia/Kolkata": [datetime(2026, 11, 1, 6, 0, tzinfo=UTC)],
    "America/New_York": [
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # spring: 02:00 EST -> 03:00 EDT
        datetime(2026, 11, 1, 6, 0, tzinfo=UTC),  # autumn: 02:00 EDT -> 01:00 EST
    ],
    "Europe/Paris": [
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 0, tzinfo=UTC),
    ],
    "Australia/Lord_Howe": [  # a 30-minute change
        datetime(2026, 4, 4, 15, 0, tzinfo=UTC),
        datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    ],
    "America/Santiago": [
        datetime(2026, 4, 5, 3, 0, tzinfo=UTC),
        datetime(2026, 9, 6, 4, 0, tzinfo=UTC),
    ],
}
MINUTES = ["0", "30", "*/15", "*", "5,35", "0-10/5", "45", "*/7"]
HOURS = ["*", "0", "1", "2", "1-3", "*/4", "9,21", "2-3", "*/1", "22-23"]
DAYS = ["*", "*", "1", "10-20", "*/2", "31"]
MONTHS = ["*", "*", "*", "3,4,9,10,11", "10-12"]
WEEKDAYS = ["*", "*", "1-5", "0", "6"]

crons = st.builds(
    lambda *fields: " ".join(fields),
    st.sampled_from(MINUTES),
    st.sampled_from(HOURS),
    st.sampled_from(DAYS),
    st.sampled_from(MONTHS),
    st.sampled_from(WEEKDAYS),
)
HOUR_US = 3_600_000_000
offsets = st.one_of(  # from a change, to the microsecond: within its hours, or days away
    st.integers(-3 * HOUR_US, 3 * HOUR_US), st.integers(-48 * HOUR_US, 48 * HOUR_US)
)


@st.composite
def series(draw: st.DrawFn) -> tuple[Rule, datetime]:
    """A rule and a start near one of its zone's changes."""
    zone = draw(st.sampled_from(sorted(CHANGES)))
    if draw(st.integers(0, 4)) == 0:
        rule = Rule(every_ms=draw(st.integers(1_000, 3 * 86_400_000)))
    else:
        rule = Rule(cron=draw(crons), zone=zone)
    change = draw(st.sampled_from(CHANGES[zone]))
    return rule, change + timedelta(microseconds=draw(offsets))


PROPERTIES = settings(deadline=None, max_examples=150)


def _series(rule: Rule, first: datetime, count: int) -> list[datetime]:
    out = [first]
    while len(out) < count:
        following = rule.after(out[-1])
        assert following is not None
        out.append(following)
    return out


@PROPERTIES
@given(series(), st.booleans())
def test_no_occurrence_precedes_the_start_and_occurrences_strictly_increase(
    drawn: tuple[Rule, datetime], exact: bool
) -> None:
    rule, start = drawn
    first = rule.first(start, exact=exact)
    assert first >= start if exact else first > start, (first, start)
    occurrences = _series(rule, first, 8)
    assert all(a < b for a, b in itertools.pairwise(occurrences)), occurrences
    if rule.cron is not None:
        # The first occurrence at or after an occurrence is itself; just after it, the next.
        assert all(rule.first(o, exact=True) == o for o in occurrences)
        assert all(
            rule.first(a + timedelta(microseconds=1), exact=True) == b
            for a, b in itertools.pairwise(occurrences)
        )
        assert rule.first(start, exact=False) == rule.first(
            start + timedelta(microseconds=1), exact=True
        )


@PROPERTIES
@given(
    series(),
    st.integers(0, 40),  # occurrences missed
    st.floats(0, 0.999),  # how far towards the next one the claim came
    st.integers(0, 50),  # the count limit
    st.one_of(st.none(), st.integers(0, 45)),  # the occurrence that is the last (until)
)
def test_a_claim_fires_the_latest_due_occurrence_and_counts_the_ones_it_skips(
    drawn: tuple[Rule, datetime], missed: int, towards: float, count_limit: int, last: int | None
) -> None:
    rule, start = drawn
    occurrences = _series(rule, rule.first(start, exact=True), missed + 2)
    now = occurrences[missed] + (occurrences[missed + 1] - occurrences[missed]) * towards
    if last is not None:
        until = _series(rule, occurrences[0], last + 1)[-1]
        rule = Rule(rule.every_ms, rule.cron, rule.zone, until, rule.missed)
        if last < missed:
            occurrences = occurrences[: last + 1]
            missed = last
    due = occurrences[0].timestamp()
    plan = rule.plan(due, now.timestamp(), count_limit=count_limit)
    assert plan.fire == occurrences[missed].timestamp()
    following = rule.after(occurrences[missed])
    assert plan.next == (None if following is None else following.timestamp())
    if rule.every_ms is not None or missed <= count_limit:
        assert (plan.skipped, plan.estimated) == (missed, False)
    else:  # counted up to the limit, the rest estimated (at least one more)
        assert plan.estimated and plan.skipped > count_limit, (plan, missed)
