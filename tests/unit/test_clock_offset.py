"""The claims' clock anchor (chronos.store.postgres.clock): the window's largest lower bound of
(database clock - monotonic clock), a slow statement anchored by a quick one, a clock that moved
back forgotten at once, old statements forgotten after the window."""

from __future__ import annotations

from chronos.store.postgres.clock import ClockOffset

THETA = 1000.0  # the database clock runs 1,000 s ahead of the monotonic one
EPS = 1e-9  # floating point


def statement(sent: float, took: float, read_after: float) -> tuple[float, float, float, float]:
    """A statement sent at ``sent`` whose rows were read ``read_after`` s after it was sent and
    whose result arrived ``took`` s after it was sent."""
    read = sent + read_after + THETA
    return sent, sent + took, read, read


def test_a_quick_statement_anchors_a_slow_one() -> None:
    clock = ClockOffset()
    quick = clock.observe(*statement(10.0, 0.004, 0.002))
    assert THETA - 0.002 - EPS <= quick <= THETA  # a lower bound, 2 ms short
    # read at once, arrived 229 ms later (a slow commit): anchored with the quick one's bound
    slow = clock.observe(*statement(10.5, 0.229, 0.001))
    assert slow == quick
    # the arrival's own bound would have made it 228 ms late
    assert THETA - slow < 0.003


def test_the_bound_never_passes_the_true_offset() -> None:
    clock = ClockOffset()
    for i in range(200):
        took = 0.001 + (i * 37 % 100) / 1000
        offset = clock.observe(*statement(i * 0.05, took, took * (i % 3) / 3))
        assert offset <= THETA + EPS  # never early


def test_a_clock_that_moved_back_is_taken_at_once() -> None:
    clock = ClockOffset()
    clock.observe(*statement(10.0, 0.004, 0.002))
    sent, arrived, read, _ = statement(10.5, 0.004, 0.002)
    stepped = clock.observe(sent, arrived, read - 2.0, read - 2.0)  # the database clock: -2 s
    assert THETA - 2.0 - 0.004 - EPS <= stepped <= THETA - 2.0 + EPS


def test_statements_older_than_the_window_are_forgotten() -> None:
    clock = ClockOffset(window_s=10.0)
    clock.observe(*statement(0.0, 0.002, 0.001))  # tight
    later = clock.observe(*statement(5.0, 0.100, 0.0))  # loose, within the window
    assert THETA - later < 0.002
    alone = clock.observe(*statement(20.0, 0.100, 0.0))  # the tight one is 20 s old
    assert abs(alone - (THETA - 0.100)) < 1e-9
