"""Shared set-up of the unit tests: settings, a manual time line, the fakes wired together."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from chronos.cluster.leadership import Leadership
from chronos.config.settings import Secret, Settings, load
from chronos.config.validation import validate
from chronos.firing.loop import FiringLoop
from chronos.store import ClaimedRow
from chronos.testing import FakePublisher, InMemoryStore, ManualClock, unfenced

OUTPUT = "out"
DEAD_LETTER = "dlq"
INPUT = "in"


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": Secret("postgresql://chronos@127.0.0.1:1/unit"),
        "input_topic": INPUT,
        "output_topic": OUTPUT,
        "dead_letter_topic": DEAD_LETTER,
        "http_port": 0,
    }
    values.update(overrides)
    return validate(load(environ={}, **values))


@dataclass
class Firing:
    """A firing loop on a manual clock, driven step by step (no threads)."""

    clock: ManualClock
    store: InMemoryStore
    publisher: FakePublisher
    loop: FiringLoop
    settings: Settings
    fired_at_ms: dict[str, int] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        *,
        auto: bool = True,
        clock: ManualClock | None = None,
        leadership: Leadership | None = None,
        shards: int = 1,
        **overrides: Any,
    ) -> Firing:
        clock = clock or ManualClock()
        store = InMemoryStore(clock)
        publisher = FakePublisher(auto=auto, wall_clock=lambda: clock.now().timestamp())
        config = settings(**overrides)
        lease = leadership or unfenced(config.node_id)
        loop = FiringLoop(config, store, publisher, lease, monotonic=clock.monotonic, shards=shards)
        return cls(clock, store, publisher, loop, config)

    def tick(self, ms: float = 0) -> None:
        """Let ``ms`` pass, then do what the two firing threads would do by now."""
        if ms:
            self.clock.advance(ms)
        self.loop.step()  # claim if it is time, finish known outcomes
        self.loop.dispatcher.fire_due()  # the dispatcher: publish due timers...
        self.loop.dispatcher.serve_reports()  # ...serve delivery reports, write audit events
        self.loop.finish(force=True)  # delete delivered rows at once

    def run_for(self, ms: float, step_ms: float = 1) -> None:
        elapsed = 0.0
        while elapsed < ms:
            self.tick(step_ms)
            elapsed += step_ms

    def at(self, ms: float) -> datetime:
        return self.clock.now() + timedelta(milliseconds=ms)


def claimed_rows(count: int, *, size: int, due_in_ms: float = 0) -> list[ClaimedRow]:
    """Rows as a claim returns them, each with a ``size``-byte value, due in ``due_in_ms``."""
    now = datetime.now(UTC)
    return [
        ClaimedRow(
            id=f"row-{uuid.uuid4()}",
            deadline=now.timestamp() + due_in_ms / 1000,
            readied_at=now,
            key=None,
            value=b"v" * size,
            headers=[],
            attempts=0,
            last_error=None,
            target_topic=None,
            remaining_ms=due_in_ms,
            claimed_monotonic=time.monotonic(),
        )
        for _ in range(count)
    ]
