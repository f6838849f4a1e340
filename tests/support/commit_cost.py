"""What CHRONOS_DATABASE_SYNCHRONOUS_COMMIT costs intake: enqueue throughput per setting.

    python -m tests.support.commit_cost [--messages 60000] [--batch 2000]

Starts a durable embedded Postgres (fsync on) in a temporary directory under /tmp, migrates it,
and enqueues the same messages (100-byte values, deadlines an hour ahead) through
``PostgresStore.enqueue`` in consumed-batch-sized statements, once per setting, alternating
the settings over a few rounds, each run on an emptied table. Prints messages per second for
each. Without a standby, ``remote_apply`` waits for the local WAL flush only, like ``on``;
with a synchronous standby it adds one round trip to the standby per batch (one commit per
consumed batch).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from chronos.embedded import EmbeddedPostgres
from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore, migrate

SETTINGS = ("", "off", "on", "remote_apply")


def rate(url: str, level: str, messages: int, batch: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:  # every run starts from an empty table
        conn.execute("TRUNCATE chronos_messages")
        conn.execute("CHECKPOINT")
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=60000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="chronos-commit-cost-", dir="/tmp"))
    root.chmod(0o755)
    try:
        with EmbeddedPostgres(root / "data", durable=True) as server:
            url = server.url
            migrate.upgrade(url)
            results: dict[str, list[float]] = {level: [] for level in SETTINGS}
            for _ in range(args.rounds):
                for level in SETTINGS:
                    results[level].append(rate(url, level, args.messages, args.batch))
            for level in SETTINGS:
                print(
                    f"synchronous_commit={level or '(server default: on)':<28} "
                    f"{statistics.median(results[level]):>9,.0f} msg/s (median of {args.rounds})"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
