"""What shards buy at the store (docs/shards.md): the store-level ceiling — messages a second
through a message's whole life (enqueued, claimed, deleted as fired with its history record) —
of one Postgres on one core against two Postgres, each on a core of its own, and the Postgres
CPU a message costs in each.

    python -m loadtest.probes.shard_ceiling [--seconds 20] [--workers 4] [--rounds 2]

Two scratch servers (durable, as a deployment's). The layouts run in turns, ``--rounds`` times:

- **one**: server A pinned to core 0 (``sched_setaffinity`` of the postmaster and every process
  it runs; the backends it forks later inherit it), ``--workers`` threads on it;
- **two**: A on core 0, B on core 1, half the threads on each (the input partitions split
  between two shards).

Each thread loops over batches of 2,000: enqueue them due now, claim them, delete them fired
with their history records (``PostgresStore``, the statements the node's loops run). Printed:
messages a second, each server's CPU per message (µs: its postmaster and every process it runs,
``psutil``), and the ratio two / one. The client (Python threads) is not pinned: on a machine of
two cores it competes with the servers for them, which caps the second layout below twice the
first; the report says how busy the machine was.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

import psutil
import psycopg

from chronos.protocol import ScheduledMessage
from chronos.store import Ending, PostgresStore
from chronos.store.history import FIRED
from loadtest.probes.history_cost import server_cpu
from loadtest.probes.scratch import scratch_postgres

BATCH = 2_000


def pin(server: psutil.Process, core: int) -> None:
    """Pin a Postgres server (its postmaster and every process it runs) to ``core``."""
    for process in [server, *server.children()]:
        try:
            os.sched_setaffinity(process.pid, {core})
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue


def unpin(server: psutil.Process) -> None:
    every = set(range(os.cpu_count() or 1))
    for process in [server, *server.children()]:
        try:
            os.sched_setaffinity(process.pid, every)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue


def postmaster(url: str) -> psutil.Process:
    """The server's postmaster: the parent of a backend."""
    with psycopg.connect(url) as conn:
        return psutil.Process(conn.info.backend_pid).parent()


def life(store: PostgresStore, stop: threading.Event, done: list[int]) -> None:
    """Batches through their whole life until ``stop``; counts the messages in ``done``."""
    me = str(uuid.uuid4())
    while not stop.is_set():
        prefix = uuid.uuid4().hex[:10]
        due = store.ping() - timedelta(milliseconds=1)
        messages = [
            ScheduledMessage(f"{prefix}-{i}", due + timedelta(seconds=2), b"k", b"\xab" * 100, [])
            for i in range(BATCH)
        ]
        store.enqueue(messages, 0)
        rows = store.claim(me, 10_000, BATCH, 5)
        ends = [Ending(FIRED, "orders", i % 12, i, 1, None) for i in range(len(rows))]
        store.delete_fired(me, [(r.id, r.readied_at) for r in rows], None, ends)
        done.append(len(rows))


def run_layout(
    stores: list[PostgresStore], servers: list[psutil.Process], workers: int, seconds: float
) -> dict[str, float]:
    """``workers`` threads spread over ``stores`` for ``seconds``: messages a second, and each
    server's CPU microseconds per message it handled."""
    stop = threading.Event()
    counts: list[list[int]] = [[] for _ in stores]
    threads = [
        threading.Thread(target=life, args=(stores[i % len(stores)], stop, counts[i % len(stores)]))
        for i in range(workers)
    ]
    cpu_before = [server_cpu(s) for s in servers]
    machine_before = psutil.cpu_times()
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    machine_after = psutil.cpu_times()
    busy = sum(getattr(machine_after, f) - getattr(machine_before, f) for f in ("user", "system"))
    result = {
        "rate": sum(sum(c) for c in counts) / elapsed,
        "machine_busy_cores": busy / elapsed,
    }
    for i, server in enumerate(servers):
        handled = sum(counts[i]) or 1
        result[f"pg{i}_us_per_message"] = (server_cpu(server) - cpu_before[i]) / handled * 1e6
        result[f"pg{i}_cores"] = (server_cpu(server) - cpu_before[i]) / elapsed
    return result


@contextmanager
def two_servers() -> Iterator[list[str]]:
    with ExitStack() as stack:
        yield [stack.enter_context(scratch_postgres(f"shard{i}")) for i in range(2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("needs two cores at least")
    with two_servers() as urls:
        stores = [PostgresStore(url) for url in urls]
        for store in stores:
            store.maintain_history(timedelta(days=7))  # today's history partition, as the leader
        servers = [postmaster(url) for url in urls]
        results: dict[str, list[dict[str, float]]] = {"one": [], "two": []}
        for _ in range(args.rounds):
            for layout in ("one", "two"):
                pin(servers[0], 0)
                if layout == "two":
                    pin(servers[1], 1)
                used = stores[:1] if layout == "one" else stores
                results[layout].append(
                    run_layout(used, servers[: len(used)], args.workers, args.seconds)
                )
                for server in servers:
                    unpin(server)
        for store in stores:
            store.close()
    print(f"{args.workers} client threads, batches of {BATCH:,}, {args.seconds:.0f} s a run:")
    rates = {}
    for layout, runs in results.items():
        rates[layout] = statistics.median(r["rate"] for r in runs)
        for r in runs:
            servers_text = ", ".join(
                f"Postgres {i}: {r[f'pg{i}_us_per_message']:.1f} µs/msg, "
                f"{r[f'pg{i}_cores']:.2f} cores"
                for i in range(1 if layout == "one" else 2)
            )
            print(
                f"  {layout:>3} server(s): {r['rate']:>8,.0f} msg/s ({servers_text}; machine "
                f"{r['machine_busy_cores']:.2f} cores busy)"
            )
    print(f"ratio two / one (median rates): {rates['two'] / rates['one']:.2f}")


if __name__ == "__main__":
    main()
