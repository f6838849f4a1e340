"""The history arrays of ``delete_fired`` / ``advance_fired`` (``history_params``) and how the
Postgres store sends them: a batch with no record at all (every claim fired while
CHRONOS_HISTORY_FIRED=false) runs with the history off, so the statement reads no array and
inserts nothing; one record in it and the batch records as before. The same for an enqueue: a
batch of schedules alone ends no message and runs without the history's part; a cancel or a
reschedule in it and it records. No database: the statement runner is replaced."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from chronos.errors import StoreError
from chronos.protocol import Action, ScheduledMessage
from chronos.store import Ending, PostgresStore
from chronos.store.history import DEAD_LETTERED, EXPIRED, FIRED
from chronos.store.postgres.history import history_params

AT = datetime(2030, 1, 1, tzinfo=UTC)
NODE = "6f1c0000-0000-4000-8000-000000000001"
CLAIMS = [("a", AT), ("b", AT), ("c", AT)]
ARRAYS = (
    "outcome_names",
    "outcome_ix",
    "topic_names",
    "topic_ix",
    "partitions",
    "offsets",
    "lateness",
    "reason_names",
    "reason_ix",
)


def _empty(params: dict[str, Any]) -> bool:
    return all(params[name] == [] for name in ARRAYS)


def test_a_batch_without_any_record_is_sent_with_the_history_off() -> None:
    params = history_params(3, [None, None, None], True)
    assert params["history"] is False and _empty(params)
    assert history_params(0, [], True)["history"] is False


def test_one_record_in_the_batch_sends_every_claim_by_its_position() -> None:
    ends = [None, Ending(EXPIRED, "dl", 0, 7, 2_000, "expired"), None]
    params = history_params(3, ends, True)
    assert params["history"] is True
    assert params["outcome_names"] == [EXPIRED] and params["outcome_ix"] == [None, 1, None]
    assert params["topic_names"] == ["dl"] and params["reason_ix"] == [None, 1, None]
    assert params["offsets"] == [None, 7, None]


def test_no_endings_means_each_one_fired_and_the_history_off_sends_nothing() -> None:
    fired = history_params(2, None, True)
    assert fired["history"] is True and fired["outcome_ix"] == [1, 1]
    assert fired["outcome_names"] == [FIRED]
    off = history_params(2, [Ending(FIRED), None], False)
    assert off["history"] is False and _empty(off)
    with pytest.raises(ValueError, match="2 endings for 3 claims"):
        history_params(3, [Ending(FIRED), None], True)


class Recorder:
    """Stands for ``_execute_tuples``: records each statement and its ``history``; raises
    ``fail`` once if given."""

    def __init__(self, fail: StoreError | None = None) -> None:
        self.runs: list[tuple[str, bool]] = []
        self.fail = fail

    def __call__(self, name: str, params: dict[str, Any]) -> tuple[list[tuple[Any, ...]], float]:
        self.runs.append((name, params["history"]))
        if self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail
        if name == "enqueue_batch":
            return [], 0.0  # every schedule inserted
        return [(claim_id,) for claim_id in params["ids"]], 0.0


def _store(runner: Recorder, history: bool = True) -> PostgresStore:
    store = PostgresStore("postgresql://chronos@127.0.0.1:1/unit", history=history)
    store._execute_tuples = runner  # type: ignore[method-assign]
    return store


def test_a_fired_only_batch_skips_the_insert_and_a_batch_with_a_failure_records() -> None:
    runner = Recorder()
    store = _store(runner)
    assert store.delete_fired(NODE, CLAIMS, None, [None, None, None]) == {"a", "b", "c"}
    assert store.delete_fired(NODE, CLAIMS, [None, None, None], [None] * 3) == {"a", "b", "c"}
    failure = Ending(DEAD_LETTERED, "dl", 0, 1, 0, "publish_failed")
    store.delete_fired(NODE, CLAIMS, None, [None, failure, None])
    store.delete_fired(NODE, CLAIMS)  # no endings: each one fired, recorded
    assert runner.runs == [
        ("delete_fired", False),
        ("advance_fired", False),
        ("delete_fired", True),
        ("delete_fired", True),
    ]
    off = Recorder()
    _store(off, history=False).delete_fired(NODE, CLAIMS, None, [None, failure, None])
    assert off.runs == [("delete_fired", False)]


def test_a_batch_without_records_never_takes_an_error_for_a_history_failure() -> None:
    no_partition = StoreError("no partition", sqlstate="23514")
    runner = Recorder(fail=no_partition)
    with pytest.raises(StoreError):  # nothing was inserted: the error is the delete's own
        _store(runner).delete_fired(NODE, CLAIMS, None, [None, None, None])
    assert runner.runs == [("delete_fired", False)]
    recorded = Recorder(fail=no_partition)
    _store(recorded).delete_fired(NODE, CLAIMS)  # the record lost, the delete run again
    assert recorded.runs == [("delete_fired", True), ("delete_fired", False)]


def test_an_enqueue_of_schedules_alone_runs_without_the_history_and_an_ending_one_records() -> None:
    runner = Recorder()
    store = _store(runner)
    schedules = [ScheduledMessage(f"s{i}", AT, b"k", b"v", []) for i in range(3)]
    cancel = ScheduledMessage("s0", AT, b"k", None, [], action=Action.CANCEL)
    reschedule = ScheduledMessage("s1", AT, b"k", b"v", [], action=Action.RESCHEDULE)
    store.enqueue(schedules, 0)
    store.enqueue([*schedules[2:], cancel], 0)
    store.enqueue([reschedule], 0)
    _store(off := Recorder(), history=False).enqueue([cancel], 0)
    assert runner.runs == [
        ("enqueue_batch", False),
        ("enqueue_batch", True),
        ("enqueue_batch", True),
    ]
    assert off.runs == [("enqueue_batch", False)]
