"""Two leaders at once are harmless (real Postgres): every sweep is a compare-and-set.

Two recovery loops on two connections both believe they lead and sweep the same table at the
same instant, in small batches so that their statements interleave: claims of a node whose
heartbeat lapsed (the fast takeover), claims of a node without a heartbeat row older than the
hold time (the fallback), and young claims of a live node (left alone). Pass: each stuck row is
reset by exactly one of them, logged once, and the live node keeps its claims.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter

import pytest

from chronos.cluster.recovery import RecoveryLoop
from chronos.store import PostgresStore
from chronos.testing import unfenced
from tests.support import Topics, make_settings
from tests.support.cluster import Table

pytestmark = pytest.mark.integration

HOLD_MS = 3000
WINDOW_MS = 3000


def _claims(table: Table, prefix: str, count: int, node: str, age_ms: int) -> set[str]:
    ids = [f"{prefix}-{i:05d}" for i in range(count)]
    table.rows(
        "INSERT INTO chronos_messages (id, deadline, readied_at, readied_by, message_value) "
        "SELECT id, now() + interval '1 hour', now() - make_interval(secs => %s / 1000.0), "
        "%s::uuid, 'v'::bytea FROM unnest(%s::text[]) AS id RETURNING id",
        (age_ms, node, ids),
    )
    return set(ids)


def _beat(table: Table, node: str, age_ms: int) -> None:
    table.rows(
        "INSERT INTO chronos_nodes (node_id, started_at, heartbeat_at) "
        "VALUES (%s::uuid, now(), now() - make_interval(secs => %s / 1000.0)) RETURNING node_id",
        (node, age_ms),
    )


def test_two_leaders_sweeping_at_once_reset_each_row_exactly_once(
    migrated_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    table = Table(migrated_database_url)
    dead, live, ghost = (str(uuid.uuid4()) for _ in range(3))
    a, b = (str(u) for u in sorted(uuid.uuid4() for _ in range(2)))
    for node, age in ((dead, WINDOW_MS + 2000), (live, 0), (a, 0), (b, 0)):
        _beat(table, node, age)
    lapsed = _claims(table, "lapsed", 6000, dead, 500)  # young claims, dead node
    stuck = _claims(table, "stuck", 3000, ghost, HOLD_MS + 1000)  # no heartbeat row
    kept = _claims(table, "live", 100, live, 500)  # a live node's young claims
    assert table.claimed() == 9100

    stores = [PostgresStore(migrated_database_url) for _ in range(2)]
    loops = []
    for node, store in zip((a, b), stores, strict=True):
        settings = make_settings(
            migrated_database_url,
            "127.0.0.1:1",
            Topics("in", "out", "dlq"),
            node_id=node,
            hold_time_ms=HOLD_MS,
            liveness_window_ms=WINDOW_MS,
            lookahead_ms=500,
            delivery_timeout_ms=1000,
        )
        leadership = unfenced(node, WINDOW_MS)
        leadership.elected(node)  # both believe they lead
        loops.append(RecoveryLoop(settings, store, leadership, batch=500))
    assert all(loop.leadership.is_leader() for loop in loops)

    barrier = threading.Barrier(2)
    counts: dict[int, int] = {}

    def sweep(index: int) -> None:
        barrier.wait()
        counts[index] = loops[index].run_once()

    try:
        with caplog.at_level(logging.WARNING, logger="chronos.cluster.recovery"):
            threads = [threading.Thread(target=sweep, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    finally:
        for store in stores:
            store.close()
    logged = Counter(
        r.message_id  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == "suspected_failure"
    )
    twice = [i for i, n in logged.items() if n > 1]
    assert not twice, f"{len(twice)} rows reset twice, e.g. {twice[:5]}"
    assert set(logged) == lapsed | stuck
    assert counts[0] + counts[1] == len(lapsed) + len(stuck), counts
    assert min(counts.values()) > 0, counts  # both really swept
    assert table.claimed() == len(kept)
    assert table.count() == len(lapsed) + len(stuck) + len(kept)
    causes = Counter(
        r.cause  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "event", None) == "suspected_failure"
    )
    assert causes == {"heartbeat_lapsed": len(lapsed), "hold_time": len(stuck)}
