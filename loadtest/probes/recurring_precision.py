"""Occurrences of series against one-shot messages due at the same instants: is an occurrence
fired as precisely as a one-shot message, and what does "delete or advance" cost?

    python -m loadtest.probes.recurring_precision [--series 1000] [--occurrences 10]
                                                  [--period 1.0] [--lead 5]

On a scratch Postgres (``loadtest.probes.scratch``, durable) it stores ``--series`` series
(``chronosEvery`` of ``--period`` seconds, ``--occurrences`` occurrences each, first ones spread
over one period from T) and, for every occurrence, a one-shot message due at the same instant;
then runs one node's real firing loop (``FiringLoop`` on ``PostgresStore``, default settings,
relaying each record's scheduled instant) against an in-memory publisher until everything is
published. Prints, for occurrences and one-shot messages apart, the lateness (publish time minus
scheduled instant: p50, p99, worst, on this process's wall clock, which is the database's) and
the mean duration of the firing loop's phase-2 statements (``delete_fired`` for batches of
one-shot messages only, ``advance_fired`` for batches with occurrences).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from chronos.protocol import format_deadline, parse_deadline
from chronos.recurrence import Rule
from chronos.store import PostgresStore
from chronos.testing import FakePublisher
from loadtest.probes.firing_loop import firing_loop
from loadtest.probes.scratch import run_sql, scratch_database, scratch_server, server_now

AT = "x-scheduled-for"

FILL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, recurrence)
SELECT 'series-' || s, %(at)s + s * %(spread)s * interval '1 second', 'series'::bytea,
       '\\x00'::bytea, %(rule)s
FROM generate_series(0, %(series)s - 1) s;
INSERT INTO chronos_messages (id, deadline, message_key, message_value)
SELECT 'once-' || s || '-' || k,
       %(at)s + (s * %(spread)s + k * %(period)s) * interval '1 second', 'once'::bytea,
       '\\x00'::bytea
FROM generate_series(0, %(series)s - 1) s, generate_series(0, %(occurrences)s - 1) k;
"""


class TimedStore(PostgresStore):
    """A PostgresStore that times its phase-2 statements, by kind."""

    timings: dict[str, list[float]]

    def delete_fired(self, node_id, claims, nexts=None, ends=None):  # type: ignore[no-untyped-def]
        kind = "advance_fired" if nexts and any(n is not None for n in nexts) else "delete_fired"
        t0 = time.perf_counter()
        try:
            return super().delete_fired(node_id, claims, nexts, ends)
        finally:
            self.timings.setdefault(kind, []).append(time.perf_counter() - t0)


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    return (
        f"p50 {statistics.median(ordered):6.1f} ms  p99 {p99:6.1f} ms  worst {ordered[-1]:6.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.recurring_precision", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--series", type=int, default=1_000)
    parser.add_argument("--occurrences", type=int, default=10)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--lead", type=float, default=5.0, help="seconds to fill before T")
    args = parser.parse_args()
    period_ms = round(args.period * 1000)
    with scratch_server("recurring") as server_url:
        url = scratch_database(server_url, "recurring")
        at = server_now(url) + timedelta(seconds=args.lead)
        until = at + timedelta(milliseconds=period_ms * (args.occurrences - 1) + period_ms - 1)
        fill = {
            "at": at,
            "spread": args.period / args.series,
            "period": args.period,
            "series": args.series,
            "occurrences": args.occurrences,
            "rule": Rule(every_ms=period_ms, until=until).encode(),
        }
        run_sql(url, FILL, fill)
        run_sql(url, "ANALYZE chronos_messages")
        if datetime.now(UTC) > at - timedelta(seconds=0.5):
            raise SystemExit("filling took longer than --lead: raise it")
        publisher = FakePublisher()
        loop, store, thread = firing_loop(url, 2_000, publisher, relay_deadline_header=AT)
        loop.store = timed = TimedStore(url)
        timed.timings = {}
        store.close()
        thread.start()
        total = 2 * args.series * args.occurrences
        try:
            give_up = time.monotonic() + args.lead + args.occurrences * args.period + 120
            while len(publisher.records) < total and time.monotonic() < give_up:
                time.sleep(0.2)
            time.sleep(1.0)  # a series that kept going would show here
        finally:
            loop.stop()
            thread.join(30)
            timed.close()
    lateness: dict[bytes, list[float]] = {b"series": [], b"once": []}
    for r in publisher.records:
        scheduled = parse_deadline((dict(r.headers)[AT] or b"").decode())
        lateness[r.key or b""].append(r.timestamp_ms - scheduled.timestamp() * 1000)
    instants = {(r.key, dict(r.headers)[AT]) for r in publisher.records if r.key == b"series"}
    print(
        f"{args.series} series x {args.occurrences} occurrences every {args.period} s, and as "
        f"many one-shot messages due at the same instants (first at {format_deadline(at)})"
    )
    for key, label in ((b"series", "occurrences"), (b"once", "one-shot   ")):
        print(f"{label}  {len(lateness[key]):6d} published  lateness {_percentiles(lateness[key])}")
    print(
        f"distinct occurrence instants: {len(instants)} (expected {args.series * args.occurrences})"
    )
    for kind, durations in sorted(timed.timings.items()):
        mean_ms = statistics.fmean(durations) * 1000
        print(f"{kind:14s} {len(durations):5d} statements, mean {mean_ms:6.2f} ms")


if __name__ == "__main__":
    main()
