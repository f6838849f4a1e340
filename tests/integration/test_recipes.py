"""The producer recipes of docs/recipes.md (Java, Go, Node.js, Python: ``docs/recipes/``), built
and run against the real broker with a Chronos node: what each one schedules fires as the page
says, on the output topic and in the table.

Every recipe sends the same messages, its ids and keys starting with a prefix of its own (one
node, one database and one set of topics for the module): in 3 s (``order-1``); at an instant
4 s ahead (``order-2``); 60 s ahead, rescheduled to 5 s with a new value (``order-3``);
scheduled then cancelled (``order-4``: never fires); every 2 s from 2 s until 7 s
(``heartbeat``: three times); a cron series in Europe/Paris for the tenant ``acme`` (waiting in
the table for its next weekday 9:00, tenant and rule as sent).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from chronos import recurrence
from tests.integration.nodes import Nodes, fire_ms, ms, now
from tests.support import Topics, consumer_config
from tests.support.databases import DatabaseFactory
from tests.support.kafka import delete_topics, new_topics
from tests.support.recipes import LANGUAGES, build

# one node for the four (make test's --dist loadgroup keeps the module on one worker)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("recipes")]

SLACK_MS = 3000  # how late a fire may be, after the recipe's own start-up
PARIS = ZoneInfo("Europe/Paris")


@dataclass(frozen=True)
class Stage:
    nodes: Nodes
    advance_ms: int

    @property
    def topics(self) -> Topics:
        return self.nodes.topics


@pytest.fixture(scope="module")
def stage(database_factory: DatabaseFactory, kafka_bootstrap: str) -> Iterator[Stage]:
    """One node on its own database and topics, shared by the four recipes."""
    topics = new_topics(kafka_bootstrap, "recipes")
    url = database_factory.create_migrated()
    nodes = Nodes(url, kafka_bootstrap, topics)
    try:
        nodes.start()
        yield Stage(nodes, nodes.settings().timing_advance_ms)
    finally:
        nodes.stop_all()
        database_factory.drop(url)
        delete_topics(kafka_bootstrap, topics)


@pytest.mark.parametrize("language", LANGUAGES)
def test_recipe_fires_what_it_schedules(language: str, stage: Stage, tmp_path: Path) -> None:
    recipe = build(language, tmp_path)
    prefix = f"{language}-{uuid.uuid4().hex[:6]}-"
    started = now()
    recipe.run(stage.nodes.bootstrap, stage.topics.input, prefix)
    finished = now()

    out = _fired(stage, prefix, until=finished + timedelta(seconds=7), expected=6)

    def fired(key: str, value: bytes, *after_s: int) -> None:
        """Fired once ``after_s`` seconds after the recipe's start (each: a series), none else."""
        records = [m for m in out if m.key() == f"{prefix}{key}".encode()]
        assert [m.value() for m in records] == [value] * len(after_s), f"{language}: {key}"
        for stamp, seconds in zip(sorted(map(fire_ms, records)), after_s, strict=True):
            earliest = ms(started) + seconds * 1000 - stage.advance_ms - 1
            latest = ms(finished) + seconds * 1000 + SLACK_MS
            assert earliest <= stamp <= latest, (
                f"{language}: {key} fired at {stamp}, not +{seconds} s"
            )

    fired("order-1", b"pay order 1", 3)  # in 3 s
    fired("order-2", b"ship order 2", 4)  # at an instant
    fired("order-3", b"new plan", 5)  # rescheduled from +60 s to +5 s, with its new value
    fired("order-4", b"never sent")  # cancelled: never
    fired("heartbeat", b"tick", 2, 4, 6)  # every 2 s from +2 s, none after +7 s
    _assert_daily_report(stage.nodes.database_url, prefix, (started, finished), language)


def _fired(stage: Stage, prefix: str, until: datetime, expected: int) -> list[Message]:
    """The output records keyed with ``prefix``, read from the beginning: once ``expected`` of
    them have come and ``until`` is a second past (a fourth heartbeat, or the cancelled message,
    would show by then)."""
    topics = stage.topics
    consumer = Consumer({**consumer_config(stage.nodes.bootstrap), "enable.partition.eof": False})
    consumer.assign(
        [TopicPartition(topics.output, p, OFFSET_BEGINNING) for p in range(topics.partitions)]
    )
    mine: list[Message] = []
    give_up = time.monotonic() + (until - now()).total_seconds() + 15
    try:
        while time.monotonic() < give_up:
            if len(mine) >= expected and now() > until + timedelta(seconds=1):
                break
            for m in consumer.consume(500, timeout=0.2):
                key = m.key()
                if m.error() is None and key is not None and key.startswith(prefix.encode()):
                    mine.append(m)
    finally:
        consumer.close()
    return mine


def _assert_daily_report(
    url: str, prefix: str, sent: tuple[datetime, datetime], language: str
) -> None:
    """The cron series waits for its next weekday 9:00 in Paris, for the tenant ``acme``."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT deadline, tenant, recurrence FROM chronos_messages WHERE id = %s",
            (f"{prefix}daily-report",),
        ).fetchone()
    assert row is not None, f"{language}: the daily report is not waiting"
    deadline, tenant, stored = row
    assert tenant == "acme", f"{language}: tenant {tenant!r}"
    rule = recurrence.decode(stored)
    assert (rule.cron, rule.zone, rule.every_ms) == ("0 9 * * 1-5", "Europe/Paris", None), rule
    # its first occurrence after the record was read: sent in this window (a second's margin)
    first, last = sent
    candidates = {_next_weekday_nine(first), _next_weekday_nine(last + timedelta(seconds=1))}
    assert deadline in candidates, f"{language}: next occurrence {deadline}, not {candidates}"


def _next_weekday_nine(after: datetime) -> datetime:
    """The first Monday-to-Friday 9:00 in Paris after ``after``."""
    local = after.astimezone(PARIS)
    for days in range(8):
        day = local.date() + timedelta(days=days)
        nine = datetime(day.year, day.month, day.day, 9, tzinfo=PARIS)
        if nine.weekday() < 5 and nine > after:
            return nine
    raise AssertionError("no weekday in a week")
