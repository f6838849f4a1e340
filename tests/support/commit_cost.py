"""What CHRONOS_DATABASE_SYNCHRONOUS_COMMIT costs intake, as enqueue throughput per setting:
run it when choosing the setting for a deployment, or after a change to the enqueue's commit.

    python -m tests.support.commit_cost [--messages 60000] [--batch 2000] [--rounds 3]

On a scratch Postgres (``loadtest.probes.scratch``, durable: fsync on) it enqueues the same
messages (100-byte values, deadlines an hour ahead) through ``PostgresStore.enqueue`` in
consumed-batch-sized statements, once per setting, alternating the settings over ``--rounds``
rounds, each run on an emptied table. Prints messages per second for each. Without a standby,
``remote_apply`` waits for the local WAL flush only, like ``on``; with a synchronous standby it
adds one round trip to the standby per batch (one commit per consumed batch).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta

from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore
from loadtest.probes.scratch import run_sql, scratch_postgres

SETTINGS = ("", "off", "on", "remote_apply")
EMPTY = """
TRUNCATE chronos_messages;
CHECKPOINT;
"""


def rate(url: str, level: str, messages: int, batch: int) -> float:
    run_sql(url, EMPTY)  # every run starts from an empty table
    store = PostgresStore(url, synchronous_commit=level)
    deadline = datetime.now(UTC) + timedelta(hours=1)
    payload = b"x" * 100
    started = time.perf_counter()
    for start in range(0, messages, batch):
        store.enqueue(
            [
                ScheduledMessage(str(uuid.uuid4()), deadline, None, payload, [])
                for _ in range(min(batch, messages - start))
            ],
            0,
        )
    elapsed = time.perf_counter() - started
    store.close()
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.commit_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--messages", type=int, default=60000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with scratch_postgres("commit-cost") as url:
        results: dict[str, list[float]] = {level: [] for level in SETTINGS}
        for _ in range(args.rounds):
            for level in SETTINGS:
                results[level].append(rate(url, level, args.messages, args.batch))
    for level in SETTINGS:
        print(
            f"synchronous_commit={level or '(server default: on)':<28} "
            f"{statistics.median(results[level]):>9,.0f} msg/s (median of {args.rounds})"
        )


if __name__ == "__main__":
    main()
