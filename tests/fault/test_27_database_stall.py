"""Scenario 27 — the database stalls: every node's commits hang for longer than the hold time and
the liveness window, then resume together, under load.

The stall is a synchronous standby that is named but never connects: the nodes run with
``CHRONOS_DATABASE_SYNCHRONOUS_COMMIT=on`` and the test sets the server's
``synchronous_standby_names`` to a standby that does not exist, for hold + 2 s, then clears it.
Every write of the nodes (heartbeats, claims, deletes, inserts) then hangs at its commit, as on
a server whose fsync takes seconds or whose real synchronous standby went away; reads go on, and
no statement timeout bounds a commit. The test checks that it hit: the nodes' sessions are seen
waiting on ``SyncRep``.

What the nodes must not do when the database resumes: take each other's claims over (every
heartbeat and every claim looks older than the window and the hold time at that moment) while
the holder still fires them or is about to delete what it fired, nor fire a claim whose statement
was answered only after the stall (it was stamped when the statement began). Two nodes, 200
messages a second due 1-3 s after they are sent, at the shipped defaults (hold 20 s, window
5 s: the stall lasts 22 s).

Whether the leader's first sweep after the stall comes before its peer's first deletes is a race
the peer wins on an idle machine (a few milliseconds against the detection interval) and loses
on a starved one, where scenario 21 met it. The test makes it certain: the peer (not the leader)
is frozen from half a second before the database resumes until ``FROZEN_AFTER_S`` after, as a
starved machine deschedules a process for a moment; that alone (shorter than the hold time and
the window) would take nothing over.

Pass: lost 0, nothing early, no copy (the claims under way and the rows fired but not yet deleted
in the stall wait for their holders), every row gone from the table, no node exited, and no
message later than the stall + the peer's freeze after it + ``MARGIN_S`` (what came due in the
stall fires once it ends; nothing waits for a takeover). (There was no lateness bound.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest

from tests.fault.bounds import MARGIN_S
from tests.support import Topics
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import Cluster
from tests.support.polling import eventually
from tests.support.services import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FROZEN_BEFORE_S = 0.5  # the peer is frozen this long before the database resumes...
FROZEN_AFTER_S = 1.5  # ...until this long after (shorter than the hold time and the window)

# Named only for the stall: no standby of this name ever connects.
NAME_THE_STANDBY = "ALTER SYSTEM SET synchronous_standby_names = 'chronos_fault_no_standby'"
FORGET_THE_STANDBY = "ALTER SYSTEM RESET synchronous_standby_names"
WAITING_COMMITS = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE wait_event = 'SyncRep' AND application_name LIKE 'chronos-%'"
)


@contextmanager
def commits_hang(server_url: str) -> Iterator[Callable[[], int]]:
    """While inside, the commits of sessions with ``synchronous_commit`` on wait for a standby
    that never comes; yields a count of the nodes' sessions waiting so. Cleared on the way out,
    whatever happens (the waiting commits then complete)."""
    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as admin:
        try:
            admin.execute(NAME_THE_STANDBY)
        except psycopg.errors.InsufficientPrivilege:
            unavailable("naming a synchronous standby needs a superuser on the test server")
        try:
            admin.execute("SELECT pg_reload_conf()")
            yield lambda: int(admin.execute(WAITING_COMMITS).fetchone()[0])  # type: ignore[index]
        finally:
            admin.execute(FORGET_THE_STANDBY)
            admin.execute("SELECT pg_reload_conf()")


def test_a_database_stall_longer_than_the_hold_time_leaves_no_copy(
    make_cluster: Callable[..., Cluster],
    kafka_bootstrap: str,
    topics: Topics,
    postgres_server: str,
) -> None:
    cluster = make_cluster(database_synchronous_commit="on")
    hold_s = cluster.overrides["hold_time_ms"] / 1000
    window_s = cluster.overrides["liveness_window_ms"] / 1000
    stall_s = max(hold_s, window_s) + 2.0
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    assert eventually(lambda: sum(n.metric("chronos_leader") for n in nodes) == 1, timeout=15)
    peer = next(n for n in nodes if n.metric("chronos_leader") == 0)
    load = Load(kafka_bootstrap, topics.input, rate=200, delay=(1.0, 3.0)).start()
    try:
        time.sleep(3)
        claimed = cluster.table.claimed()
        with commits_hang(postgres_server) as waiting:
            assert eventually(lambda: waiting() >= 2, timeout=5, every=0.02), (
                "the nodes' commits did not wait for the standby"
            )
            began = time.monotonic()
            most = 0
            while time.monotonic() - began < stall_s - FROZEN_BEFORE_S:
                most = max(most, waiting())
                time.sleep(0.1)
            peer.pause()
            time.sleep(FROZEN_BEFORE_S)
        resumed = time.monotonic()
        time.sleep(FROZEN_AFTER_S)
        peer.resume()
        assert eventually(lambda: cluster.table.scalar(WAITING_COMMITS) == 0, timeout=10)
        # The stall's claims given back and fired, the rest on time; the leader's first sweeps
        # after the stall, which must take nothing over, come within the window. (The nodes run
        # on through the check: a later takeover still shows as a copy.)
        time.sleep(window_s + 3)
    finally:
        peer.resume()
        messages = load.stop()
    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=20), cluster.table.count()
    stalled = [e for n in nodes for e in n.events("database_stalled")]
    taken_over = [e for n in nodes for e in n.events("suspected_failure")]
    record_result(
        ScenarioResult.of(
            "27-database-stall",
            f"every commit of two nodes hung {stall_s:.0f} s (hold {hold_s:.0f} s), the peer "
            f"frozen {FROZEN_BEFORE_S + FROZEN_AFTER_S:.0f} s as it resumed, 200 msg/s",
            report,
            None,
            stall_s=stall_s,
            claimed_at_fault=claimed,
            sessions_waiting_at_most=most,
            claims_taken_over=len(taken_over),
            stalls_seen_by_the_leader=len(stalled),
            resumed_after_s=round(resumed - began, 2),
        )
    )
    assert not [n.name for n in nodes if not n.alive()], cluster.logs()
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    late_bound_ms = (stall_s + FROZEN_AFTER_S + MARGIN_S) * 1000
    assert report.late.max <= late_bound_ms, f"{report.summary()} (bound {late_bound_ms:.0f} ms)"
    assert report.duplicates == 0, (
        f"{report.summary()}; claims taken over: {len(taken_over)} "
        f"({sorted({str(e.get('cause')) for e in taken_over})})"
    )
