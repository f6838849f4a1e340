"""Scenario 3 — a node paused (SIGSTOP) for twice the liveness window while it holds claims,
then resumed (SIGCONT): the "falsely suspected failure" of the design. At the shipped defaults
a paused node is suspected once its heartbeat is older than the window (5 s), long before the
hold time (20 s, the fallback), and its lease has ended a second before that: so the pause is
twice the window (10 s), not twice the hold time. The pause stops the node's
whole process tree at once (the node process and its intake process), as a container freeze or
a VM stall does (``NodeProcess.pause``).

* **with a real peer** (two node processes): the node is paused right after a claim, before
  it fires anything; the peer takes its rows over once its heartbeat lapsed and fires them.
  Pass: the resumed node does not crash and fires new messages afterwards; it noticed its stale
  claims (``claim_expired`` in its log) instead of firing them; lost 0; nothing early;
  duplicates at most the rows it held; the rows it held fire within the takeover of the pause
  (window + detection + poll + margin, ``tests/fault/bounds.py``), every other message within
  the pause (+ margin: the paused node's input partitions wait for it, the pause is shorter
  than the consumer session); the peer never found one of its claims deleted under it
  (no ``fenced_delete`` on the peer).
* **late delete against a peer's re-claim** (deterministic): the node fires its rows and gets
  their delivery reports, but its delete is held up (the test holds a row lock on them), and
  the node is paused. While it is paused and after the window, a peer resets those claims and
  re-claims them (the test plays the peer, in the transaction that holds the lock), then
  commits; the node's pending delete runs against the peer's claims, and the node is resumed.
  Pass: every re-claimed row is still in the table, claimed by the peer with its claim time
  unchanged; the node counted those deletes as fenced; once the peer gives the rows back they
  fire; lost 0; duplicates at most the rows the node held (here: exactly the re-claimed ones,
  which it had delivered once already); every message's first copy on time (``ON_TIME_MS``:
  each was published before the pause, only its delete held back; there was no lateness bound).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from chronos.store import statement_params
from chronos.store.postgres.sql import query
from tests.fault.bounds import MARGIN_S, ON_TIME_MS, lateness, takeover_s
from tests.support import Topics
from tests.support.checker import (
    ScenarioResult,
    due_in,
    expectations,
    record_result,
    scheduled,
    send,
)
from tests.support.cluster import Cluster, NodeProcess
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

SETTLE_S = 0.3  # after SIGSTOP: let statements the node had already sent finish server-side


def pause_before_firing(cluster: Cluster, node: NodeProcess, timeout: float) -> dict[str, datetime]:
    """SIGSTOP ``node`` just after a claim, while none of its claimed rows is due yet (nothing
    of it published or awaiting a report); returns what it holds."""
    advance = timedelta(milliseconds=cluster.overrides["timing_advance_ms"])
    sql = "SELECT id, deadline, readied_at, now() FROM chronos_messages WHERE readied_by = %s::uuid"
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        rows = cluster.table.rows(sql, (node.node_id,))
        if rows and min(r[1] for r in rows) - advance - rows[0][3] > timedelta(milliseconds=250):
            node.pause()
            time.sleep(SETTLE_S)
            rows = cluster.table.rows(sql, (node.node_id,))
            paused_db = rows[0][3] - timedelta(seconds=SETTLE_S) if rows else None
            if rows and all(r[1] - advance > paused_db for r in rows):
                return {r[0]: r[2] for r in rows}
            node.resume()
        time.sleep(0.01)
    raise AssertionError(f"{node.name} was never caught holding unfired claims")


def test_paused_node_with_a_real_peer(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    paused = cluster.start("paused")
    peer = cluster.start("peer")
    cluster.wait_ready()
    # Past the liveness window (its peer takes its claims over), not the hold time: on resume
    # the heartbeat thread renews the lease before the firing threads run, and the timers it
    # held must still not fire (they did, in one full run of two, before a lease renewed after
    # it ended waited for the firing loop to give them back: chronos.cluster.leadership).
    pause_s = 2 * cluster.overrides["liveness_window_ms"] / 1000

    first = [due_in(2 + i / 200) for i in range(800)]  # 2..6 s, 200 per second
    send(kafka_bootstrap, topics.input, first)
    held = pause_before_firing(cluster, paused, timeout=15)
    paused_at = time.time() - SETTLE_S
    time.sleep(pause_s - SETTLE_S)
    assert paused.alive()
    paused.resume()
    resumed_at = time.time()

    assert paused.wait_event("claim_expired", 10) is not None, "stale claims not noticed"
    fired_before = paused.metric("chronos_fired_messages_total")
    second = [due_in(1 + i / 100) for i in range(300)]
    send(kafka_bootstrap, topics.input, second)
    messages = first + second
    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=15), cluster.table.count()
    fired_after = paused.metric("chronos_fired_messages_total") - fired_before
    takeover = [report.fired_at[t] / 1000 - paused_at for t in held if t in report.fired_at]
    record_result(
        ScenarioResult.of(
            "03-pause-real-peer",
            "SIGSTOP 2x window, then SIGCONT (a peer takes over)",
            report,
            max(takeover, default=None),
            held_when_paused=len(held),
            fired_by_resumed_node=fired_after,
            resumed_after_s=round(resumed_at - paused_at, 2),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicates <= len(held), f"{len(held)} held: {report.summary()}"
    bound = takeover_s(peer.settings)
    assert max(takeover, default=0) <= bound, f"held rows fired {max(takeover):.1f} s > {bound}"
    late = lateness(report, messages)
    slow = {t: ms for t, ms in late.items() if t not in held and ms > (pause_s + MARGIN_S) * 1000}
    assert not slow, f"{len(slow)} messages later than the pause + {MARGIN_S} s: {slow}"
    assert paused.alive() and peer.alive(), paused.tail()
    assert fired_after > 0, "the resumed node fired nothing afterwards"
    assert peer.events("fenced_delete") == [], "a row the peer had claimed was deleted under it"


def _waiting_delete(conn: psycopg.Connection[Any], app: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock' AND query LIKE %s",
        (app, "%Phase 2: delete%"),
    ).fetchone()
    return bool(row and row[0])


def test_late_delete_never_removes_a_row_a_peer_reclaimed(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    node = cluster.start("paused")
    cluster.wait_ready()
    hold_ms = cluster.overrides["hold_time_ms"]
    window_ms = cluster.overrides["liveness_window_ms"]
    app = f"chronos-{node.node_id[:8]}"

    due = datetime.now(UTC) + timedelta(seconds=4)
    messages = [scheduled(due) for _ in range(200)]
    send(kafka_bootstrap, topics.input, messages)
    assert cluster.table.wait(lambda t: t.count() == len(messages), timeout=15)
    # Wait for the claim (lookahead before the deadline), then lock half of the claimed rows.
    assert cluster.table.wait(lambda t: t.claimed(node.node_id) == len(messages), timeout=10)
    observer = psycopg.connect(cluster.database_url, autocommit=True)
    peer_id = str(uuid.uuid4())
    with psycopg.connect(cluster.database_url) as peer:  # one transaction, committed below
        claims = peer.execute(
            "SELECT id, readied_by, readied_at FROM chronos_messages "
            "WHERE readied_by = %s::uuid ORDER BY id LIMIT 100 FOR UPDATE",
            (node.node_id,),
        ).fetchall()
        assert len(claims) == 100
        # The node fires all 200, receives their reports, and its delete waits on our lock.
        assert eventually(lambda: _waiting_delete(observer, app), 10), "no delete waiting"
        node.pause()
        paused_at = time.time()
        time.sleep(window_ms / 1000 * 2 - 0.5)  # the peer may take over after the window
        # The peer: the failure detector's compare-and-set reset, then a fresh claim.
        reset = peer.execute(
            query("reset_stuck"),
            statement_params("reset_stuck", str(node.node_id), [(c[0], c[2]) for c in claims]),
        ).fetchall()
        assert len(reset) == len(claims)
        reclaimed: dict[str, datetime] = dict(
            peer.execute(
                "UPDATE chronos_messages SET readied_at = clock_timestamp(), "
                "readied_by = %s::uuid WHERE id = ANY(%s) AND readied_at IS NULL "
                "RETURNING id, readied_at",
                (peer_id, [c[0] for c in claims]),
            ).fetchall()
        )
        assert set(reclaimed) == {c[0] for c in claims}
    # Committed: the node's pending delete now runs (server-side) against the peer's claims.
    try:
        time.sleep(0.5)
        node.resume()
        resumed = time.monotonic()
        assert eventually(lambda: node.metric("chronos_fenced_deletes_total") > 0, 5)
        fenced = node.metric("chronos_fenced_deletes_total")
        now_rows: dict[str, datetime] = dict(
            observer.execute(
                "SELECT id, readied_at FROM chronos_messages WHERE readied_by = %s::uuid",
                (peer_id,),
            ).fetchall()
        )
        assert time.monotonic() - resumed < hold_ms / 1000 - 0.5, "checked too late"
    finally:
        observer.close()
    missing = set(reclaimed) - set(now_rows)
    changed = {i for i in now_rows if now_rows[i] != reclaimed[i]}
    assert not missing, f"the resumed node deleted {len(missing)} rows a peer had re-claimed"
    assert not changed, f"{len(changed)} of the peer's claims were altered"
    assert fenced == len(reclaimed), f"{fenced} fenced deletes for {len(reclaimed)} re-claims"
    assert cluster.table.count() == len(reclaimed), "the node's other deletes did not run"

    # The peer gives its claims back (as at a graceful shutdown); the node fires them again.
    cluster.table.rows(
        "UPDATE chronos_messages SET readied_at = NULL, readied_by = NULL "
        "WHERE readied_by = %s::uuid RETURNING id",
        (peer_id,),
    )
    report = cluster.check(expectations(messages), timeout=30, quiet=2.0)
    assert cluster.table.wait(lambda t: t.count() == 0, timeout=15), cluster.table.count()
    record_result(
        ScenarioResult.of(
            "03-pause-late-delete",
            "SIGSTOP 2x window with a delete pending; a peer re-claims; SIGCONT",
            report,
            None,
            held_when_paused=len(messages),
            reclaimed_by_peer=len(reclaimed),
            fenced_deletes=fenced,
            paused_s=round(time.time() - paused_at, 1),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicates <= len(reclaimed), report.summary()
    # Every message was published before the pause (only its delete was held back): on time.
    assert report.late.max <= ON_TIME_MS, report.summary()
    assert node.alive(), node.tail()
