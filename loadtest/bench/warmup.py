"""The broker's warm-up, once, before the first scenario that uses it.

Apache Kafka is a Java program: a freshly started broker runs its request paths interpreted until
the JIT compiler has seen them often enough, and on a 2-core machine the compiler's threads take
their CPU from everything else. A broker restarted for every scenario spent its first tens of
seconds that way in each of them: it used 0.9 cores at 1,000 msg/s through the echo relay
(0.25 warm), and the scenarios measured its warm-up, not Chronos. A production broker has been
running for days, so the bench starts one broker, warms it here with the echo relay at the
sustained rate, and runs every scenario on it with topics of its own
(``Stack.clear_broker`` deletes those of the scenario before, and waits until their
partitions have left the disk).

The warm-up's record (``bench.json``'s ``stack.broker_warmup``) keeps the broker's cores second by
second: the figure falls as the compiler finishes, which is what the warm-up is for.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any

from loadtest.bench import scenarios as sc
from loadtest.bench.context import Context, Interrupted, say, wait_child
from loadtest.bench.procstats import tree_cpu_s
from loadtest.bench.stack import clean_env, launch

WARMUP_SECONDS = {True: 20.0, False: 45.0}
"""How long the echo relay carries the sustained rate (``--quick``: the first)."""
WARMUP_DELAY = "uniform:0s-1s"


def warm_broker(ctx: Context) -> dict[str, Any]:
    """Run the echo relay at ``SUSTAINED_RATE`` for ``WARMUP_SECONDS`` on topics of its own;
    return what the broker used, second by second (or the error: the scenarios run all the
    same, on a colder broker)."""
    try:
        return _warm(ctx)
    except Interrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - said and recorded; the scenarios go on
        say(f"[warm-up] FAILED: {exc}")
        with contextlib.suppress(Exception):
            ctx.stack.stop_nodes()
        return {"error": str(exc)[:500]}


def _warm(ctx: Context) -> dict[str, Any]:
    stack = ctx.stack
    seconds = WARMUP_SECONDS[ctx.quick]
    sdir = ctx.out / "warmup"
    sdir.mkdir(parents=True, exist_ok=True)
    say(
        f"[warm-up] the echo relay at {sc.SUSTAINED_RATE:,} msg/s for {seconds:g} s "
        "(the broker's JIT)"
    )
    topics = stack.topics("warmup")
    stack.start_relay(topics, sdir)
    argv = [
        "-m", "loadtest", "run", "--bootstrap", stack.bootstrap,
        "--input-topic", topics.input, "--output-topic", topics.output,
        "--dead-letter-topic", topics.dead_letter, "--rate", str(sc.SUSTAINED_RATE),
        "--delay", WARMUP_DELAY, "--duration", f"{seconds:g}s", "--drain-timeout", "10s",
        "--grace", "0s", "--out", str(sdir / "events"),
    ]  # fmt: skip
    cores: list[float] = []
    started = time.monotonic()
    try:
        harness = launch(
            argv, log_path=sdir / "harness.log", env=clean_env(), death_signal=signal.SIGTERM
        )
        last = tree_cpu_s(stack.broker_pid)
        while harness.poll() is None:
            time.sleep(1.0)
            now = tree_cpu_s(stack.broker_pid)
            cores.append(round(now - last, 2))
            last = now
        code = wait_child(harness, "the warm-up")
    finally:
        stack.stop_nodes()
    record = {
        "seconds": round(time.monotonic() - started, 1),
        "rate": sc.SUSTAINED_RATE,
        "delay": WARMUP_DELAY,
        "returncode": code,
        "broker_cores_per_second": cores,
    }
    if len(cores) >= 10:
        first, last5 = cores[:5], cores[-10:-5]  # the last 5 s of sending (then it drains)
        say(
            f"[warm-up] the broker's cores: {sum(first) / 5:.2f} in the first 5 s, "
            f"{sum(last5) / 5:.2f} in the last 5 s of sending"
        )
    return record
