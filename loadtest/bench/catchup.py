"""The ``catchup`` scenario: paced catch-up after an outage of every node.

The nodes (``CHRONOS_CATCHUP_RATE`` set) store a backlog sent by one load generator, all due at
one instant; once it is stored every node is stopped, and a second load generator starts a
stream due 2-5 s ahead. The backlog comes due while the nodes are away; ``away_s`` after its
deadline they are restarted (a consumer group of their own, from the first group's committed
offsets: the embedded broker was seen not to hand out the partitions of a group every member had
left within a minute). Both load generators record what fires; the figures are the backlog's
fired rate (first to last fire, and the busiest ``WINDOW_S``), against the catch-up rate, and
the p99 lateness of the stream messages due more than a second after the restarted nodes hold
every input partition (and how many of those were due while the backlog drained).
"""

from __future__ import annotations

import bisect
import json
import shlex
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadtest.bench import scenarios as sc
from loadtest.bench.context import Context, say, wait_child
from loadtest.bench.results.catchup import CatchupFigures
from loadtest.bench.scenarios import Scenario, Workload
from loadtest.bench.stack import Stack, Topics, clean_env, launch
from loadtest.harness.events import RECEIVED_FILE, SENT_FILE

WINDOW_S = 5.0
SETTLE_S = 1.0  # stream messages due within this of the nodes' readiness are not on time
RESTART_ALLOWANCE_S = 30.0
"""The stream runs this much longer than the outage and the drain at the catch-up rate: the
restarted nodes take seconds to start and to share the input partitions (more on a loaded
machine); the stream due once they are ready is what must fire on time."""


@dataclass(frozen=True, slots=True)
class Fire:
    """One record of the run on the output or dead-letter topic."""

    id: str
    deadline_ms: int
    publish_ms: int
    dead_letter: bool


def _quantile(values: Sequence[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def busiest_window(fired_ms: Sequence[int], window_s: float = WINDOW_S) -> float | None:
    """The most fires in any ``window_s`` starting at a whole second after the first, per s."""
    if not fired_ms:
        return None
    ordered = sorted(fired_ms)
    span = int(window_s * 1000)
    starts = range(ordered[0], max(ordered[0], ordered[-1] - span) + 1, 1000)
    return max(
        (bisect.bisect_left(ordered, s + span) - bisect.bisect_left(ordered, s)) / window_s
        for s in starts
    )


def figures(
    rate: float,
    away_s: float,
    restart_ms: float,
    ready_ms: float,
    backlog_sent: Iterable[str],
    backlog_fires: Sequence[Fire],
    stream_sent: Iterable[str],
    stream_fires: Sequence[Fire],
) -> CatchupFigures:
    """The scenario's figures from what each load generator sent and recorded: the nodes were
    started again at ``restart_ms`` and held every input partition at ``ready_ms`` (the stream
    due before then waited for its records to be read, whatever the pacing)."""
    firsts: dict[str, Fire] = {}
    duplicates = 0
    for fire in [*backlog_fires, *stream_fires]:
        if fire.dead_letter:
            continue
        if fire.id in firsts:
            duplicates += 1
            firsts[fire.id] = min(firsts[fire.id], fire, key=lambda f: f.publish_ms)
        else:
            firsts[fire.id] = fire
    sent = set(backlog_sent)
    dead = {f.id for f in backlog_fires if f.dead_letter} - firsts.keys()
    fired = sorted(firsts[i].publish_ms for i in sent if i in firsts)
    drain_s = (fired[-1] - fired[0]) / 1000 if len(fired) > 1 else None
    streamed = set(stream_sent)
    seen = firsts.keys() | {f.id for f in stream_fires if f.dead_letter}
    on_time = [
        float(f.publish_ms - f.deadline_ms)
        for i, f in firsts.items()
        if i in streamed and f.deadline_ms > ready_ms + SETTLE_S * 1000
    ]
    during = sum(
        1
        for i, f in firsts.items()
        if i in streamed and ready_ms + SETTLE_S * 1000 < f.deadline_ms <= (fired or [0])[-1]
    )
    p99 = _quantile(on_time, 0.99)
    return CatchupFigures(
        catchup_rate=rate,
        away_s=away_s,
        backlog_sent=len(sent),
        backlog_fired=len(fired),
        backlog_dead_lettered=len(dead),
        backlog_lost=len(sent - firsts.keys() - dead),
        fired_before_restart=sum(1 for f in fired if f < restart_ms),
        duplicates=duplicates,
        drain_s=None if drain_s is None else round(drain_s, 2),
        backlog_rate_per_s=round(len(fired) / drain_s, 1) if drain_s else None,
        busiest_window_per_s=busiest_window(fired),
        stream_sent=len(streamed),
        stream_lost=len(streamed - seen),
        stream_measured=len(on_time),
        stream_during_drain=during,
        stream_p99_ms=None if p99 is None else round(p99, 1),
        stream_max_ms=round(max(on_time), 1) if on_time else None,
    )


def read_events(events: Path) -> tuple[list[str], list[Fire]]:
    """The ids a load generator sent and the records it received."""
    import pyarrow.parquet as pq

    sent = [str(i) for i in pq.read_table(events / SENT_FILE, columns=["id"]).column("id")]
    received = pq.read_table(
        events / RECEIVED_FILE, columns=["id", "deadline_ms", "publish_ms", "is_dead_letter"]
    ).to_pylist()
    fires = [
        Fire(str(r["id"]), int(r["deadline_ms"]), int(r["publish_ms"]), bool(r["is_dead_letter"]))
        for r in received
    ]
    return sent, fires


def copy_offsets(bootstrap: str, topic: str, partitions: int, old: str, new: str) -> int:
    """Commit for group ``new`` the offsets group ``old`` committed on ``topic``; the count."""
    from confluent_kafka import Consumer, TopicPartition

    config = {"bootstrap.servers": bootstrap, "enable.auto.commit": False}
    reader = Consumer({**config, "group.id": old})
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = [tp for tp in reader.committed(wanted, timeout=30) if tp.offset >= 0]
    finally:
        reader.close()
    if committed:
        writer = Consumer({**config, "group.id": new})
        try:
            writer.commit(offsets=committed, asynchronous=False)
        finally:
            writer.close()
    return len(committed)


def _harness(stack: Stack, topics: Topics, args: list[str], seed: int, out: Path) -> list[str]:
    return [
        "-m", "loadtest", "run", "--bootstrap", stack.bootstrap,
        "--input-topic", topics.input, "--output-topic", topics.output,
        "--dead-letter-topic", topics.dead_letter, *args, "--seed", str(seed), "--out", str(out),
    ]  # fmt: skip


DUE_SQL = "SELECT extract(epoch FROM max(deadline))::float8 FROM chronos_messages"


def _wait_stored(stack: Stack, count: int, until: float) -> int:
    stored = 0
    while time.time() < until:
        counts = stack.sql_each("SELECT count(*) FROM chronos_messages")  # every shard's
        stored = sum(int(rows[0][0]) for rows in counts)
        if stored >= count:
            break
        time.sleep(0.5)
    return stored


def run_catchup_scenario(ctx: Context, scenario: Scenario) -> dict[str, Any]:
    """The scenario end to end: its record for bench.json (``status`` ok), or an exception."""
    assert scenario.workload is not None
    stack, backlog = ctx.stack, scenario.workload
    rate, away = float(scenario.extra["catchup_rate"]), float(scenario.extra["away_s"])
    stream_rate = float(scenario.extra["stream_rate"])
    tag, sdir = f"[{scenario.name}]", ctx.out / scenario.name
    sdir.mkdir(parents=True, exist_ok=True)
    node_env = stack.node_env
    stack.node_env = {**node_env, "CHRONOS_CATCHUP_RATE": str(int(rate))}
    rec: dict[str, Any] = {**scenario.as_dict(), "status": "running", "offered_rate": backlog.rate}
    rec["load"] = f"{backlog.describe()} + {stream_rate:g} msg/s {sc.CATCHUP_STREAM_DELAY}"
    try:
        stack.clear_broker()
        topics = stack.topics(scenario.name)
        stack.reset_table()
        stack.wait_ready(stack.start_nodes(scenario.nodes, topics, sdir), topics)
        started = time.time()
        due = started + backlog.delay_bounds_s()[0]
        argv = _harness(stack, topics, backlog.harness_args(), 1, sdir / "backlog")
        rec["harness_command"] = "python " + shlex.join(argv)
        say(f"{tag} sending {backlog.describe()}")
        sender = launch(argv, log_path=sdir / "harness-backlog.log", env=clean_env())
        stored = _wait_stored(stack, backlog.messages, due - 3)
        say(f"{tag} {stored:,} stored {time.time() - started:.0f} s after the start; stopping")
        rec["stored_before_stop"] = stored
        # The deadline the load generator gave the backlog (it starts a moment after launch).
        latest = [rows[0][0] for rows in stack.sql_each(DUE_SQL) if rows[0][0] is not None]
        due = float(max(latest, default=due))
        stack.stop_nodes()
        # The first group's offsets are final once its members are gone: copied now, off the
        # restart's path.
        after = replace(topics, group=topics.group + "-after-outage")
        copy_offsets(stack.bootstrap, topics.input, stack.partitions, topics.group, after.group)
        back_at = due + away
        stream = Workload(
            stream_rate,
            sc.CATCHUP_STREAM_DELAY,
            duration_s=round(back_at - time.time() + RESTART_ALLOWANCE_S + backlog.messages / rate),
            drain_timeout_s=30.0,
            grace_s=backlog.grace_s,
        )
        argv = _harness(stack, topics, stream.harness_args(), 2, sdir / "stream")
        rec["stream_command"] = "python " + shlex.join(argv)
        streamer = launch(argv, log_path=sdir / "harness-stream.log", env=clean_env())
        time.sleep(max(0.0, back_at - time.time()))
        (sdir / "restarted").mkdir(exist_ok=True)
        restart_ms = time.time() * 1000
        stack.wait_ready(stack.start_nodes(scenario.nodes, after, sdir / "restarted"), after)
        ready_ms = time.time() * 1000
        rec["restart"] = {"away_s": round(restart_ms / 1000 - due, 1),
                          "ready_after_s": round((ready_ms - restart_ms) / 1000, 1)}  # fmt: skip
        say(
            f"{tag} nodes started {restart_ms / 1000 - due:.0f} s after the backlog's deadline, "
            f"ready (every partition held) {(ready_ms - restart_ms) / 1000:.0f} s later"
        )
        codes = [wait_child(p, f"the load of {scenario.name}") for p in (sender, streamer)]
        if any(codes):
            raise RuntimeError(f"a load generator exited with {codes}; see {sdir}/harness-*.log")
    finally:
        stack.stop_nodes()
        stack.node_env = node_env
    result = figures(rate, away, restart_ms, ready_ms, *read_events(sdir / "backlog"),
                     *read_events(sdir / "stream"))  # fmt: skip
    rec["catchup"] = result.as_dict()
    rec["files"] = {"node logs": f"{scenario.name}/", "figures": f"{scenario.name}/catchup.json"}
    (sdir / "catchup.json").write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    rec["status"] = "ok"
    return rec
