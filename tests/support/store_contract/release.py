"""The store contract of what follows a claim: the fenced delete of fired rows, releases, and a
node id's registration."""

from __future__ import annotations

from datetime import timedelta

from tests.support.store_contract.common import HORIZON, Harness, claims, msg, node


class ReleaseContract:
    """Subclasses provide a ``harness`` fixture."""

    # -------------------------------------------------------------------- delete (phase 2)

    def test_delete_is_fenced_by_the_claim(self, harness: Harness) -> None:
        store = harness.store
        me, peer = node(), node()
        store.enqueue([msg("f", harness.now() + timedelta(milliseconds=500))], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        assert store.delete_fired(peer, claims(rows)) == set()
        stale = [("f", rows[0].readied_at - timedelta(microseconds=1))]
        assert store.delete_fired(me, stale) == set()
        assert store.get_message("f") is not None
        assert store.delete_fired(me, claims(rows)) == {"f"}
        assert store.get_message("f") is None
        assert store.delete_fired(me, claims(rows)) == set()  # already gone: nothing
        assert store.delete_fired(me, []) == set()

    def test_a_row_a_peer_took_over_is_not_deleted_by_the_old_owner(self, harness: Harness) -> None:
        store = harness.store
        slow, peer = node(), node()
        store.enqueue([msg("t", harness.now() + timedelta(milliseconds=500))], 0)
        old = store.claim(slow, HORIZON, 10, 5)
        harness.advance(300)
        stuck = store.find_stuck(200, 10)
        assert [(s.id, s.readied_by) for s in stuck] == [("t", slow)]
        assert store.reset_stuck(stuck) == [("t", slow)]
        new = store.claim(peer, HORIZON, 10, 5)
        assert [r.id for r in new] == ["t"]
        assert store.delete_fired(slow, claims(old)) == set()
        assert store.delete_fired(peer, claims(new)) == {"t"}

    # -------------------------------------------------------------------- release

    def test_release_gives_rows_back_fenced_counting_failures(self, harness: Harness) -> None:
        store = harness.store
        me, peer = node(), node()
        store.enqueue(
            [msg(i, harness.now() + timedelta(milliseconds=500)) for i in ("a", "b", "c")], 0
        )
        rows = store.claim(me, HORIZON, 10, 5)
        assert store.release(peer, claims(rows), failed=True) == {}
        assert store.release(me, claims(rows)[:1], failed=False) == {"a": 0}
        assert store.release(me, claims(rows)[1:2], failed=True, errors=["boom"]) == {"b": 1}
        b = store.get_message("b")
        assert b is not None
        assert (b.readied_at, b.readied_by, b.attempts, b.last_error) == (None, None, 1, "boom")
        c = store.get_message("c")
        assert c is not None
        assert c.readied_by == me  # untouched
        assert sorted(r.id for r in store.claim(peer, HORIZON, 10, 5)) == ["a", "b"]
        assert store.release(me, [], failed=False) == {}

    def test_release_without_an_error_keeps_the_last_one(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        store.enqueue([msg("e", harness.now() + timedelta(milliseconds=500))], 0)
        store.release(me, claims(store.claim(me, HORIZON, 1, 5)), failed=True, errors=["first"])
        store.release(me, claims(store.claim(me, HORIZON, 1, 5)), failed=False)
        e = store.get_message("e")
        assert e is not None
        assert (e.attempts, e.last_error) == (1, "first")

    def test_release_node_gives_back_every_claim_of_that_node_only(self, harness: Harness) -> None:
        store = harness.store
        me, peer = node(), node()
        store.enqueue(
            [msg(f"r{i}", harness.now() + timedelta(milliseconds=500)) for i in range(4)], 0
        )
        store.claim(me, HORIZON, 3, 5)
        store.claim(peer, HORIZON, 3, 5)
        assert store.release_node(me) == 3
        assert store.release_node(me) == 0
        claimed = store.list_messages(state="claimed", park_attempts=5, limit=10)
        assert [(m.id, m.readied_by) for m in claimed] == [("r3", peer)]

    def test_release_node_is_fenced_by_the_process_start(self, harness: Harness) -> None:
        """Two processes sharing a node id: the later one's release leaves the earlier claims."""
        store = harness.store
        me = node()
        store.enqueue(
            [msg(f"f{i}", harness.now() + timedelta(milliseconds=500)) for i in range(4)], 0
        )
        earlier = store.claim(me, HORIZON, 2, 5)
        harness.advance(50)
        since = store.register_node(me, 10.0, hostname="h", version="v")
        assert since is not None
        later = store.claim(me, HORIZON, 2, 5)
        assert store.release_node(me, since) == 2
        claimed = store.list_messages(state="claimed", park_attempts=5, limit=10)
        assert sorted(m.id for m in claimed) == sorted(r.id for r in earlier)
        assert {r.id for r in later}.isdisjoint(m.id for m in claimed)

    def test_a_node_id_held_by_a_live_node_is_refused(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        first = store.register_node(me, 10.0, hostname="a", version="v")
        assert first is not None
        assert store.register_node(me, 10.0, hostname="b", version="v") is None
        harness.advance(300)
        # Once its heartbeat is older than the liveness window, the id may be taken again.
        again = store.register_node(me, 0.2, hostname="b", version="v")
        assert again is not None and again > first
        assert store.register_node(node(), 10.0, hostname="c", version="v") is not None
