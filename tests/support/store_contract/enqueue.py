"""The store contract of enqueue: outcomes of a batch, ids, deadlines, and keys, values and
headers kept byte for byte."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chronos.errors import StoreError
from chronos.protocol import Headers
from chronos.store import Outcome
from tests.support.store_contract.common import HORIZON, Harness, claims, msg, node


class EnqueueContract:
    """Subclasses provide a ``harness`` fixture."""

    # -------------------------------------------------------------------- enqueue

    def test_future_message_is_inserted_then_a_duplicate_ignored(self, harness: Harness) -> None:
        store = harness.store
        deadline = harness.now() + timedelta(minutes=5)
        assert store.enqueue([msg("a", deadline, value=b"first")], 50) == [Outcome.INSERTED]
        assert store.enqueue([msg("a", deadline, value=b"second")], 50) == [Outcome.DUPLICATE]
        stored = store.get_message("a", include_value=True)
        assert stored is not None
        assert stored.value == b"first"
        assert stored.deadline == deadline

    def test_lapsed_unknown_message_is_fired_now_and_not_stored(self, harness: Harness) -> None:
        store = harness.store
        past = harness.now() - timedelta(seconds=30)
        assert store.enqueue([msg("late", past)], 50) == [Outcome.FIRE_NOW]
        assert store.get_message("late") is None

    def test_deadline_within_the_timing_advance_counts_as_lapsed(self, harness: Harness) -> None:
        store = harness.store
        soon = harness.now() + timedelta(seconds=5)
        assert store.enqueue([msg("soon", soon)], 10_000) == [Outcome.FIRE_NOW]
        assert store.enqueue([msg("soon", soon)], 0) == [Outcome.INSERTED]

    def test_a_deadline_exactly_at_now_plus_the_advance_fires_now(self, harness: Harness) -> None:
        store = harness.store
        with harness.frozen() as now:
            at = now + timedelta(milliseconds=50)
            assert store.enqueue([msg("on", at)], 50) == [Outcome.FIRE_NOW]
            later = at + timedelta(microseconds=1)
            assert store.enqueue([msg("after", later)], 50) == [Outcome.INSERTED]
        assert store.get_message("on") is None

    def test_lapsed_message_with_a_scheduled_id_is_ignored(self, harness: Harness) -> None:
        store = harness.store
        store.enqueue([msg("x", harness.now() + timedelta(minutes=5))], 0)
        past = harness.now() - timedelta(seconds=1)
        assert store.enqueue([msg("x", past)], 0) == [Outcome.DUE_DUPLICATE]

    def test_a_batch_reports_one_outcome_per_message_in_order(self, harness: Harness) -> None:
        store = harness.store
        future = harness.now() + timedelta(minutes=5)
        past = harness.now() - timedelta(minutes=5)
        store.enqueue([msg("old", future)], 0)
        batch = [msg("n1", future), msg("p1", past), msg("old", future), msg("old2", past)]
        store.enqueue([msg("old2", future)], 0)
        assert store.enqueue(batch, 0) == [
            Outcome.INSERTED,
            Outcome.FIRE_NOW,
            Outcome.DUPLICATE,
            Outcome.DUE_DUPLICATE,
        ]
        assert store.enqueue([], 0) == []

    def test_a_fired_id_is_forgotten_and_can_be_scheduled_again(self, harness: Harness) -> None:
        store = harness.store
        me = node()
        store.enqueue([msg("again", harness.now() + timedelta(milliseconds=500))], 0)
        rows = store.claim(me, HORIZON, 10, 5)
        assert [r.id for r in rows] == ["again"]
        assert store.delete_fired(me, claims(rows)) == {"again"}
        later = harness.now() + timedelta(minutes=1)
        assert store.enqueue([msg("again", later)], 0) == [Outcome.INSERTED]

    def test_ids_up_to_128_characters_of_any_script_are_stored(self, harness: Harness) -> None:
        store = harness.store
        later = harness.now() + timedelta(minutes=1)
        ids = ["é" * 128, "😀" * 128, "a b ", "a b", "A"]
        assert store.enqueue([msg(i, later) for i in ids], 0) == [Outcome.INSERTED] * len(ids)
        for message_id in ids:
            stored = store.get_message(message_id)
            assert stored is not None and stored.id == message_id

    def test_extreme_deadlines(self, harness: Harness) -> None:
        store = harness.store
        first = datetime(1, 1, 1, tzinfo=UTC)
        last = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
        assert store.enqueue([msg("first", first), msg("last", last)], 0) == [
            Outcome.FIRE_NOW,
            Outcome.INSERTED,
        ]
        stored = store.get_message("last")
        assert stored is not None and stored.deadline == last
        assert store.claim(node(), HORIZON, 10, 5) == []

    def test_an_over_long_id_is_a_store_error(self, harness: Harness) -> None:
        with pytest.raises(StoreError) as raised:
            harness.store.enqueue([msg("x" * 129, harness.now() + timedelta(minutes=1))], 0)
        assert raised.value.retryable is False  # the data is refused: retrying cannot help

    # -------------------------------------------------------------------- byte-exact

    def test_keys_values_and_headers_round_trip_byte_exact(self, harness: Harness) -> None:
        store = harness.store
        every_byte = bytes(range(256))
        headers: Headers = [
            ("b", every_byte),
            ("none", None),
            ("empty", b""),
            ("b", b"\x00repeat"),
            ("ünï", "çödé".encode()),
        ]
        soon = harness.now() + timedelta(milliseconds=500)
        cases: dict[str, tuple[bytes | None, bytes | None, Headers]] = {
            "binary": (every_byte, every_byte[::-1], headers),
            "null-key": (None, b"{}", []),
            "tombstone": (b"key", None, [("h", None)]),
            "empty": (b"", b"", []),
        }
        store.enqueue(
            [msg(i, soon, key=k, value=v, headers=h) for i, (k, v, h) in cases.items()], 0
        )
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert set(rows) == set(cases)
        for message_id, (key, value, hdrs) in cases.items():
            assert rows[message_id].key == key, message_id
            assert rows[message_id].value == value, message_id
            assert rows[message_id].headers == hdrs, message_id

    def test_odd_header_names_and_values_round_trip_in_order(self, harness: Harness) -> None:
        """Names that JSON or a path expression would treat specially, repeats, long values,
        non-UTF-8 values, an empty value next to a null one: all come back as they went in,
        message by message, whatever the neighbours in the batch carry."""
        store = harness.store
        names = ['"quoted"', "back\\slash", "new\nline\ttab", "$[*].key", "{}", "", "é中😀"]
        long_value = bytes(range(256)) * 3  # base64 of it would be wrapped by some encoders
        odd: Headers = [(name, bytes([i]) * i + b"\xff\xfe") for i, name in enumerate(names)]
        odd += [("dup", None), ("dup", b""), ("dup", long_value), ("\x7f", b"\x00")]
        soon = harness.now() + timedelta(milliseconds=500)
        cases: dict[str, Headers] = {
            "none-before": [],
            "odd": odd,
            "none-between": [],
            "one-null": [("only", None)],
            "one-empty": [("only", b"")],
            "none-after": [],
        }
        store.enqueue([msg(i, soon, headers=h) for i, h in cases.items()], 0)
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert {i: rows[i].headers for i in cases} == cases

    def test_a_batch_whose_columns_are_all_null_or_empty(self, harness: Harness) -> None:
        """No key, no value, no header, no topic anywhere in the batch (and an empty batch)."""
        store = harness.store
        soon = harness.now() + timedelta(milliseconds=500)
        assert store.enqueue([], 0) == []
        batch = [msg(f"bare-{i}", soon, key=None, value=None) for i in range(3)]
        assert store.enqueue(batch, 0) == [Outcome.INSERTED] * 3
        rows = store.claim(node(), HORIZON, 10, 5)
        assert sorted((r.id, r.key, r.value, r.headers, r.target_topic) for r in rows) == [
            (f"bare-{i}", None, None, [], None) for i in range(3)
        ]
        empty = [msg(f"empty-{i}", soon, key=b"", value=b"") for i in range(2)]
        assert store.enqueue(empty, 0) == [Outcome.INSERTED] * 2
        rows = store.claim(node(), HORIZON, 10, 5)
        assert sorted((r.id, r.key, r.value) for r in rows) == [
            (f"empty-{i}", b"", b"") for i in range(2)
        ]
