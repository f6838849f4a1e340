"""What a node's hot paths cost per batch, in Python and in statement time: run it after a
change to the record codec, ``chronos.store.batch`` or the enqueue, claim or delete statements.

    python -m loadtest.probes.codec_cost [--batch 2000] [--rounds 30] [--background 20000]
                                         [--durable]

On a scratch Postgres (``loadtest.probes.scratch``, fsync off unless ``--durable``) holding
``--background`` rows due in two days, it builds one batch of realistic records per round
(36-character ids, 3-4 headers, values of 100-1,000 bytes, keys of 10-40 bytes) and measures,
through ``PostgresStore``:

- encode: the Python CPU (``time.process_time``) of turning the batch into the enqueue
  statement's parameters (``chronos.store.batch.encode_batch``);
- enqueue: wall time and Python CPU of the whole ``store.enqueue`` call (encoding, the driver's
  adaptation of the parameters, the statement, reading the outcomes);
- claim: wall time and Python CPU of ``store.claim`` of the batch (the statement and decoding
  every row into a ``ClaimedRow``);
- delete_fired: wall time and Python CPU of ``store.delete_fired`` of the claimed rows.

Prints the median of the rounds per batch and per message. The process is alone on its
connection; run it on a quiet machine, timings are noisy otherwise.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from chronos.protocol import Headers, ScheduledMessage
from chronos.store import PostgresStore
from chronos.store.batch import encode_batch
from loadtest.probes.scratch import scratch_postgres

_T = TypeVar("_T")
NODE_ID = "6f1c1e0e-0000-4000-8000-000000000001"


def records(size: int, deadline: datetime, rng: random.Random) -> list[ScheduledMessage]:
    """``size`` messages as intake parses them from realistic records."""
    out: list[ScheduledMessage] = []
    for _ in range(size):
        trace = f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01".encode()
        headers: Headers = [
            ("traceparent", trace),
            ("content-type", b"application/json"),
            ("source", rng.randbytes(rng.randint(8, 24))),
        ]
        if rng.random() < 0.5:
            headers.append(("tenant", f"tenant-{rng.randint(1, 50)}".encode()))
        out.append(
            ScheduledMessage(
                str(uuid.uuid4()),
                deadline + timedelta(microseconds=rng.randint(0, 10_000_000)),
                rng.randbytes(rng.randint(10, 40)),
                rng.randbytes(rng.randint(100, 1000)),
                headers,
            )
        )
    return out


def timed(call: Callable[..., _T], *args: Any) -> tuple[_T, float, float]:
    """The result, wall seconds and this process's CPU seconds of ``call(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call(*args)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(url: str, batch: int, rounds: int, background: int) -> dict[str, list[float]]:
    store = PostgresStore(url)
    rng = random.Random(11)
    later = datetime.now(UTC) + timedelta(days=2)
    for start in range(0, background, batch):
        store.enqueue(records(min(batch, background - start), later, rng), 0)
    samples: dict[str, list[float]] = {
        name: []
        for name in (
            "encode cpu",
            "enqueue wall",
            "enqueue cpu",
            "claim wall",
            "claim cpu",
            "delete_fired wall",
            "delete_fired cpu",
        )
    }
    for _ in range(rounds):
        messages = records(batch, datetime.now(UTC) + timedelta(hours=1), rng)
        _, _, cpu = timed(encode_batch, messages)
        samples["encode cpu"].append(cpu)
        outcomes, wall, cpu = timed(store.enqueue, messages, 0)
        assert len(outcomes) == batch
        samples["enqueue wall"].append(wall)
        samples["enqueue cpu"].append(cpu)
        rows, wall, cpu = timed(store.claim, NODE_ID, 2 * 3_600_000, batch, 10)
        assert len(rows) == batch, len(rows)
        samples["claim wall"].append(wall)
        samples["claim cpu"].append(cpu)
        claims = [(r.id, r.readied_at) for r in rows]
        deleted, wall, cpu = timed(store.delete_fired, NODE_ID, claims)
        assert len(deleted) == batch
        samples["delete_fired wall"].append(wall)
        samples["delete_fired cpu"].append(cpu)
    store.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.codec_cost", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--background", type=int, default=20000)
    parser.add_argument("--durable", action="store_true", help="fsync on (default: off)")
    args = parser.parse_args()
    with scratch_postgres("codec-cost", durable=args.durable) as url:
        samples = measure(url, args.batch, args.rounds, args.background)
    print(
        f"batch {args.batch} messages, {args.rounds} rounds (median), "
        f"{args.background} background rows, durable={args.durable}"
    )
    for name, values in samples.items():
        median = statistics.median(values)
        print(
            f"{name:<18} {median * 1000:>8.2f} ms per batch {median * 1e6 / args.batch:>8.2f} "
            f"us per message"
        )


if __name__ == "__main__":
    main()
