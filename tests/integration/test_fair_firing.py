"""Fair firing on real Postgres: a firing loop with the Postgres store drains one
tenant's flood; 20 small tenants' messages, due half a second after the flood's, are each in the
first claim that may take them (their deadline within its horizon) while the flood still waits.
Without the fair claim they would wait until every flood row due before them was claimed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import patch

import pytest

from chronos.firing.loop import FiringLoop
from chronos.protocol import ScheduledMessage
from chronos.store import ClaimedRow, PostgresStore
from chronos.testing import FakePublisher, unfenced
from tests.support import Topics, make_settings

pytestmark = pytest.mark.integration

FLOOD = 40_000
SMALL_TENANTS = 20
PER_SMALL = 5
BATCH = 500


def test_small_tenants_are_claimed_as_soon_as_due_while_a_flood_drains(
    migrated_database_url: str,
) -> None:
    node_id = str(uuid.uuid4())
    settings = make_settings(
        migrated_database_url,
        "127.0.0.1:1",
        Topics("in", "out", "dlq"),
        node_id=node_id,
        claim_batch_size=BATCH,
        lookahead_ms=0,  # a row is claimable from deadline - timing advance only
    )
    store = PostgresStore(migrated_database_url)
    publisher = FakePublisher()
    try:
        since = store.register_node(node_id, 10.0, hostname="h", version="v")
        flood_due = store.ping() + timedelta(seconds=8)  # beyond the time filling takes
        small_due = flood_due + timedelta(milliseconds=500)
        rows = [
            ScheduledMessage(f"f{i:06d}", flood_due, b"flood", b"v", [], tenant="flood")
            for i in range(FLOOD)
        ]
        rows += [
            ScheduledMessage(f"s{t:02d}-{i}", small_due, b"small", b"v", [], tenant=f"s{t:02d}")
            for t in range(SMALL_TENANTS)
            for i in range(PER_SMALL)
        ]
        for start in range(0, len(rows), 5_000):
            store.enqueue(rows[start : start + 5_000], 0)
        assert datetime.now(UTC) < flood_due - timedelta(seconds=1), "filling took too long"

        horizon = timedelta(milliseconds=settings.timing_advance_ms)
        # (when the claim was called, its rows)
        claims: list[tuple[datetime, list[ClaimedRow]]] = []
        held_back: list[Sequence[str]] = []  # the tenants each claim left out
        claim = store.claim

        def recording(*args: Any, **kwargs: Any) -> list[ClaimedRow]:
            called = datetime.now(UTC)  # the statement's now() is no earlier
            claimed = claim(*args, **kwargs)
            claims.append((called, claimed))
            held_back.append(kwargs.get("exclude_tenants", ()))
            return claimed

        firing = FiringLoop(settings, store, publisher, unfenced(node_id), claims_since=since)
        with patch.object(store, "claim", side_effect=recording):
            thread = threading.Thread(target=firing.run, daemon=True)
            thread.start()
            try:
                small_ids = {r.id for r in rows if r.tenant != "flood"}
                claimed: set[str] = set()
                give_up = datetime.now(UTC) + timedelta(seconds=60)
                while not small_ids <= claimed and datetime.now(UTC) < give_up:
                    firing.stopping.wait(0.1)
                    claimed = {c.id for _, batch in list(claims) for c in batch}
            finally:
                firing.stop()
                thread.join(30)

        # When a claim's statement ran on the database clock: its rows' readied_at (the now()
        # its horizon is measured from); an empty claim ran no earlier than it was called.
        def ran_at(called: datetime, batch: list[ClaimedRow]) -> datetime:
            return batch[0].readied_at if batch else called

        first_index = next(
            n
            for n, (called, batch) in enumerate(claims)
            if ran_at(called, batch) + horizon >= small_due
        )
        first = claims[first_index][1]
        assert small_ids <= {r.id for r in first}, "a small tenant's row missed the first claim"
        claimed_before = sum(len(batch) for _, batch in claims[: first_index + 1])
        assert claimed_before < FLOOD  # the flood was still waiting in the table
        # Overload: the claim before came back full, or held the flood back (it holds its share
        # of the node's claim-ahead budget), so the first claim shares its batch.
        before = claims[first_index - 1][1]
        assert len(before) == BATCH or "flood" in held_back[first_index - 1]
        # Work conserving: the rest of the batch was the flood's, unless the flood held its
        # share of the claim-ahead budget when that claim ran (a slow machine's deliveries
        # settle later), and so was rightly left out of it.
        assert len(first) == BATCH or "flood" in held_back[first_index], (len(first), held_back)
    finally:
        store.close()
