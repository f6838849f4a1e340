"""What a cron series far behind costs the firing thread: run it after a change to
``chronos.recurrence`` or to how ``Dispatcher.add`` plans a claimed series.

    python -m loadtest.probes.series_backlog_cost [--cron '*/1 * * * *'] [--zone UTC]
                                                  [--days 365] [--batch 20] [--rounds 3]

Prints, median of ``--rounds``: the time to plan one claimed occurrence of a series whose
occurrence was due ``--days`` ago (``Rule.plan``: the latest occurrence, the skipped count), and
the time ``Dispatcher.add`` takes for a claimed batch of ``--batch`` such rows (what the firing
thread spends before any of the batch can fire; the batch is given back past the hold time).
No broker and no database: the rows are built as a claim returns them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from chronos.config.settings import Secret, load
from chronos.config.validation import validate
from chronos.firing.dispatcher import Dispatcher
from chronos.recurrence import Rule
from chronos.store import ClaimedRow
from chronos.testing import FakePublisher, unfenced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cron", default="*/1 * * * *")
    parser.add_argument("--zone", default="UTC")
    parser.add_argument("--days", type=float, default=365)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rule = Rule(cron=args.cron, zone=args.zone)
    settings = validate(
        load(environ={}, database_url=Secret("postgresql://probe@127.0.0.1:1/probe"), http_port=0)
    )
    one: list[float] = []
    batch: list[float] = []
    for _ in range(args.rounds):
        now = datetime.now(UTC)
        due = rule.first(now - timedelta(days=args.days), exact=True)
        started = time.perf_counter()
        plan = rule.plan(due.timestamp(), now.timestamp())
        one.append(time.perf_counter() - started)
        remaining_ms = (due - now).total_seconds() * 1000
        rows = [
            ClaimedRow(
                f"series-{i}",
                due.timestamp(),
                now,
                None,
                b"v",
                [],
                0,
                None,
                None,
                remaining_ms,
                time.monotonic(),
                recurrence=rule.encode(),
            )
            for i in range(args.batch)
        ]
        dispatcher = Dispatcher(settings, FakePublisher(), unfenced(settings.node_id))
        started = time.perf_counter()
        dispatcher.add(rows)
        batch.append(time.perf_counter() - started)
    print(
        f"{rule.describe()}, due {args.days:g} days ago: one row {statistics.median(one):.3f} s "
        f"(skipped {plan.skipped:,}{', estimated' if plan.estimated else ''}); "
        f"a claimed batch of {args.batch}: {statistics.median(batch):.3f} s "
        f"(hold time {settings.hold_time_ms / 1000:g} s)"
    )


if __name__ == "__main__":
    main()
