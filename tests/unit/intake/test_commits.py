"""The intake's offset commits (``chronos.intake.group.commits``): every interval, never a second
while one awaits its answer (a heartbeat queued behind the coordinator's connection waits for one
commit at most), again once answered, again after an answer that never came; a commit refused at
once holds nothing back; rebalancing answers are not warnings."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException

from chronos.intake.group.commits import UNANSWERED_S, OffsetCommits, quiet
from tests.unit.helpers import INPUT
from tests.unit.intake.helpers import Intake, wait_for
from tests.unit.intake.test_resume import P0, running


class Consumer:
    def __init__(self, refuse: bool = False) -> None:
        self.commits = 0
        self.refuse = refuse

    def commit(self, *, asynchronous: bool) -> None:
        assert asynchronous
        if self.refuse:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET))
        self.commits += 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_commit_every_interval_and_never_two_awaiting_their_answer() -> None:
    clock, consumer = Clock(), Consumer()
    commits = OffsetCommits(0.2, clock)
    assert commits.due(consumer) and consumer.commits == 1
    for _ in range(100):  # 10 s of a coordinator that does not answer (a replica not fenced)
        clock.now += 0.1
        commits.due(consumer)
    assert consumer.commits == 1
    commits.answered()
    assert commits.due(consumer) and consumer.commits == 2
    clock.now += 0.1
    commits.answered()
    assert not commits.due(consumer)  # answered, but the interval has not passed
    clock.now += 0.1
    assert commits.due(consumer) and consumer.commits == 3


def test_an_answer_that_never_comes_holds_the_commits_back_for_a_while_only() -> None:
    clock, consumer = Clock(), Consumer()
    commits = OffsetCommits(0.2, clock)
    commits.due(consumer)
    clock.now += UNANSWERED_S - 0.1
    assert not commits.due(consumer)
    clock.now += 0.2
    assert commits.due(consumer) and consumer.commits == 2


def test_a_commit_refused_at_once_holds_nothing_back() -> None:
    clock, consumer = Clock(), Consumer(refuse=True)
    commits = OffsetCommits(0.2, clock)
    assert not commits.due(consumer)
    consumer.refuse = False
    clock.now += 0.2
    assert commits.due(consumer) and consumer.commits == 1


def test_rebalancing_and_nothing_to_commit_are_quiet_other_failures_are_not() -> None:
    assert quiet(None)
    assert quiet(KafkaError(KafkaError._NO_OFFSET))
    assert quiet(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    assert quiet(KafkaError(KafkaError.ILLEGAL_GENERATION))
    assert not quiet(KafkaError(KafkaError.REQUEST_TIMED_OUT))
    assert not quiet(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))


def test_the_loop_commits_what_it_stored_as_it_goes_and_one_commit_awaits_its_answer() -> None:
    t = Intake()
    sent: list[int] = []
    commit = t.consumer.commit

    def counted(asynchronous: bool = True, **kw: object) -> None:
        sent.append(len(sent))
        commit(asynchronous, **kw)

    t.consumer.commit = counted  # type: ignore[method-assign]
    with running(t):
        t.consumer.rebalance([P0])
        t.consumer.feed([t.record("a", 60_000), t.record("b", 60_000)])
        assert wait_for(lambda: t.consumer.committed.get((INPUT, 0)) == 3)  # before the stop
        assert len(sent) >= 1
        t.consumer.callbacks.pop("on_commit")  # from now on, no answer comes back
        before = len(sent)
        t.consumer.feed([t.record("c", 60_000), t.record("d", 60_000)])
        assert wait_for(lambda: t.consumer.stored.get((INPUT, 0)) == 5)
        time.sleep(1.0)  # five intervals
        assert len(sent) - before <= 1  # the one under way when the answers stopped, or the next
    assert t.consumer.committed.get((INPUT, 0)) == 5  # the stop's own commit
