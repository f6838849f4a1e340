"""Where a claimed row's timer starts: the database clock read on this process's monotonic one.

A row's deadline is on the database clock; its timer runs on this process's monotonic clock. The
claim statement reads the database clock (``clock_timestamp()``) as it claims each row, and the
result arrives some time later: after the rest of the statement, its commit, the trip back and
the decoding of the rows. Anchored at the arrival (the deadline = the arrival + the time that
was left when the row was read), a whole batch fires late by that time whenever it is long: one
claim that took 229 ms fired its 87 messages 229 ms late (docs/benchmark-results.md, "Late
clusters: one claim batch each").

Each statement bounds the offset between the two clocks (database minus monotonic): the rows
were read between its send and its arrival, so the offset is at least (the last row's database
time - the arrival) and at most (the first row's - the send). The largest lower bound of the last
``WINDOW_S`` seconds is still a lower bound, and a quick statement among them makes it tight. A
timer set at (the deadline - that bound) fires no earlier than the deadline, and later only by
the quickest recent statement's own delay, not by this one's. Within the window the clocks are
taken not to drift apart (NTP slews a clock by at most 0.5 ms a second); a statement whose upper
bound falls below the kept lower bound shows that the database clock moved back (a step, a
failover to another primary): the window starts again from that statement.
"""

from __future__ import annotations

from collections import deque

WINDOW_S = 10.0


class ClockOffset:
    """The best lower bound of (database clock - monotonic clock) over a sliding window."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        # (arrival, lower bound), the bounds decreasing from the left: the window's maximum is
        # the leftmost entry still in the window
        self._bounds: deque[tuple[float, float]] = deque()

    def observe(self, sent: float, arrived: float, first_read: float, last_read: float) -> float:
        """Take one statement (sent and arrived on the monotonic clock, its first and last
        row read on the database clock, in seconds) and return the offset to anchor its rows
        with: the window's largest lower bound, this statement's included."""
        low, high = last_read - arrived, first_read - sent
        bounds = self._bounds
        while bounds and bounds[0][0] < arrived - self.window_s:
            bounds.popleft()
        if bounds and bounds[0][1] > high:
            bounds.clear()  # the database clock moved back: what was kept no longer holds
        while bounds and bounds[-1][1] <= low:
            bounds.pop()
        bounds.append((arrived, low))
        return bounds[0][1]
