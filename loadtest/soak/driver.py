"""The ``soak`` command: the benchmark's stack (``loadtest.bench.stack``), two nodes, the mix
for the duration with the sampler running, the drain, then the Spark analysis in its own
process (``soak --analyze DIR``, which also re-analyses an earlier run)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtest.bench.context import Context, Interrupted, say, wait_child
from loadtest.bench.driver import command_line, env_pair, machine_facts, sigterm_interrupts
from loadtest.bench.stack import POSTGRES_SETTINGS, Stack, Topics, clean_env, launch
from loadtest.bench.warmup import warm_broker
from loadtest.harness.timeutil import DurationError, parse_duration_ms
from loadtest.soak.load import SoakLoad
from loadtest.soak.sampling import DEFAULT_INTERVAL_S, SoakSampler

DESCRIPTION = (
    "Bring up embedded Postgres and Apache Kafka and two Chronos nodes, send an open-loop mix "
    "(delays from seconds to hours, cancels, reschedules, series, tenants) for --duration at "
    "--rate, sample the nodes, Postgres and the broker every --interval, drain, and analyse it "
    "with Spark: summary.json, report.html, plots and PASS/FAIL verdicts."
)
DEFAULT_RESULTS = Path("loadtest/results")
SOAK_FILE = "soak.json"
DRAIN_TIMEOUT_S = 30.0  # the load generator's window: this long after the last deadline
EMPTY_TIMEOUT_S = 60.0  # after the load generator: how long to wait for the table to empty
RETENTION_SEGMENT_BYTES = 64 * 1024 * 1024
DEFAULT_BACKLOG_ROWS = 2_000_000
"""Rows stored before the sending, due a week later (``Stack.preload``): they never fire during
the run, and make the table, its indexes and every vacuum of it the size of a production table's
(millions of rows), whatever the rate and delays the machine allows for the turnover."""


def soak_duration(text: str) -> float:
    """A positive duration (``90s``, ``4m``, ``1h``; a bare number is seconds), in seconds."""
    try:
        ms = parse_duration_ms(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than zero: {text!r}")
    return ms / 1000


def _rows(text: str) -> int:
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration", type=soak_duration, default=3600.0, help="how long to send (default 1h)"
    )
    parser.add_argument(
        "--rate", type=_positive, default=10_000.0, help="records per second (default 10000)"
    )
    parser.add_argument(
        "--output",
        "--out",
        dest="out",
        type=Path,
        help="results directory (default loadtest/results/soak-<timestamp>; must be empty)",
    )
    parser.add_argument(
        "--interval",
        type=soak_duration,
        default=DEFAULT_INTERVAL_S,
        help="sample every this long (default 10s)",
    )
    parser.add_argument(
        "--max-delay",
        type=soak_duration,
        help="the longest delay (default: the duration, at most 2h; see loadtest/soak/load.py)",
    )
    parser.add_argument(
        "--backlog",
        type=_rows,
        default=DEFAULT_BACKLOG_ROWS,
        help=f"rows stored before the run, due a week later (default {DEFAULT_BACKLOG_ROWS:,}): "
        "the schedules of days ahead a production table holds beside the ones turning over",
    )
    parser.add_argument("--nodes", type=int, default=2, help="Chronos nodes (default 2)")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic")
    parser.add_argument("--tenants", type=int, default=10, help="tenants (default 10)")
    parser.add_argument(
        "--retention",
        type=soak_duration,
        default=1800.0,
        help="the soak topics' retention.ms (default 30m; segments of 64 MB)",
    )
    parser.add_argument(
        "--drain-bound",
        type=soak_duration,
        default=600.0,
        help="after the last deadline, wait at most this long for missing fires (default 10m)",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the broker's warm-up (the echo relay)"
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--driver-memory", default="4g", help="Spark driver memory")
    parser.add_argument(
        "--node-env", action="append", type=env_pair, metavar="CHRONOS_NAME=VALUE",
        help="a setting for every node (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--postgres-setting", action="append", type=env_pair, metavar="NAME=VALUE",
        help="a server setting of the soak's Postgres (repeatable), over "
        + ", ".join(f"{k}={v}" for k, v in POSTGRES_SETTINGS.items()),
    )  # fmt: skip
    parser.add_argument("--data-dir", type=Path, help="Postgres and broker data (default: temp)")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    parser.add_argument(
        "--analyze",
        type=Path,
        metavar="DIR",
        help="run nothing: analyse the soak in DIR (again) with Spark",
    )


def _data_dir(args: argparse.Namespace) -> tuple[Path, bool]:
    if args.data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="chronos-soak-"))
        data_dir.chmod(0o755)  # Postgres runs as its own system user when we are root
        return data_dir, True
    data_dir = Path(args.data_dir).absolute()
    if data_dir.exists() and any(data_dir.iterdir()):
        raise RuntimeError(f"data directory {data_dir} is not empty")
    data_dir.mkdir(parents=True, exist_ok=True)
    return data_dir, False


def _harness_argv(stack: Stack, topics: Topics, load: SoakLoad, advance: int, out: Path,
                  drain_bound_s: float) -> list[str]:  # fmt: skip
    grace = max(0.0, drain_bound_s - DRAIN_TIMEOUT_S)
    return [
        "-m", "loadtest", "run", "--bootstrap", stack.bootstrap,
        "--input-topic", topics.input, "--output-topic", topics.output,
        "--dead-letter-topic", topics.dead_letter, *load.harness_args(),
        "--drain-timeout", f"{DRAIN_TIMEOUT_S:g}s", "--grace", f"{grace:g}s",
        "--timing-advance-ms", str(advance), "--seed", "1", "--out", str(out / "events"),
    ]  # fmt: skip


def wait_empty(stack: Stack, timeout: float, backlog: int = 0) -> int | None:
    """Rows left in the table besides the ``backlog`` stored before the run, once there are
    none or ``timeout`` has passed (an exact count)."""
    limit = time.monotonic() + timeout
    while True:
        try:
            rows = int(stack.sql("SELECT count(*) FROM chronos_messages")[0][0]) - backlog
        except Exception:  # noqa: BLE001 - the figure is missing, not the run
            return None
        if rows <= 0 or time.monotonic() > limit:
            return rows
        time.sleep(2.0)


def _soak(args: argparse.Namespace, stack: Stack, load: SoakLoad, out: Path,
          record: dict[str, Any]) -> None:  # fmt: skip
    """The run itself, on a started stack: its figures into ``record``."""
    if not args.no_warmup:
        ctx = Context(out, stack, load.duration_s < 600, set(), 0.0)
        record["broker_warmup"] = warm_broker(ctx)
    stack.clear_broker()
    retention = {
        "retention.ms": str(round(args.retention * 1000)),
        "segment.bytes": str(RETENTION_SEGMENT_BYTES),
    }
    topics = stack.topics("soak", retention)
    record["topics"] = {"names": topics.all(), "config": retention}
    stack.reset_table()
    if args.backlog:
        say(f"[soak] storing a backlog of {args.backlog:,} rows due a week later")
        record["backlog"] = stack.preload(args.backlog).as_dict()
        record["backlog"]["table_bytes"] = int(
            stack.sql("SELECT pg_total_relation_size('chronos_messages')")[0][0]
        )
    nodes = stack.start_nodes(args.nodes, topics, out)
    stack.wait_ready(nodes, topics)
    record["node_pids"] = [n.pid for n in nodes]
    advance = int(nodes[0].settings.timing_advance_ms)
    argv = _harness_argv(stack, topics, load, advance, out, args.drain_bound)
    record["harness_command"] = "python " + " ".join(argv)
    log_dirs = stack.broker.config().log_dirs
    sampler = SoakSampler(
        stack.url, nodes, out / "samples.jsonl", postgres_pid=stack.postgres_pid,
        broker_pid=stack.broker_pid, broker_log_dir=Path(log_dirs), interval=args.interval,
    )  # fmt: skip
    say(f"[soak] {len(nodes)} nodes ready; sending {record['load']['describe']}")
    sampler.start()
    started = time.monotonic()
    try:
        harness = launch(
            argv, log_path=out / "harness.log", env=clean_env(), death_signal=signal.SIGTERM
        )
        sampler.watch_load_generator(harness.pid)
        code = wait_child(harness, "the soak's load")
        record["harness"] = {"returncode": code, "elapsed_s": round(time.monotonic() - started, 1)}
        say(f"[soak] the load generator is done ({code}); waiting for the table to empty")
        rows_left = wait_empty(stack, EMPTY_TIMEOUT_S, args.backlog)
    finally:
        sampler.stop()
    final = sampler.sample(final=True)
    record["drain"] = {
        "rows_left": rows_left,  # besides the backlog
        "backlog_rows": args.backlog,
        "total_bytes": None if final.pg is None else final.pg.total_bytes,
        "index_bytes": None if final.pg is None else final.pg.index_bytes,
        "dead_rows": None if final.pg is None else final.pg.dead_rows,
        "ended_ms": final.t_ms,
    }
    record["sampler"] = {"samples": len(sampler.samples), "errors": sampler.errors[:20]}
    for node in nodes:
        (out / f"metrics-node{node.index}.txt").write_text(node.metrics_text())
    record["node_exit_codes"] = {str(k): v for k, v in stack.stop_nodes().items()}


def _load_dict(load: SoakLoad, backlog: int) -> dict[str, Any]:
    out = load.as_dict()
    out["backlog_rows"] = backlog
    if backlog:
        out["describe"] += f"; beside them {backlog:,} rows stored before the run, due a week later"
    return out


def run_soak(args: argparse.Namespace) -> int:
    load = SoakLoad.of(args.rate, args.duration, args.max_delay, args.tenants)
    out = Path(args.out or DEFAULT_RESULTS / datetime.now().strftime("soak-%Y%m%d-%H%M%S"))
    out = out.absolute()
    if out.exists() and any(out.iterdir()):
        raise RuntimeError(f"output directory {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    (out / "stack").mkdir()
    data_dir, temp_data = _data_dir(args)
    node_env = dict(args.node_env or [])
    postgres_settings = {**POSTGRES_SETTINGS, **dict(args.postgres_setting or [])}
    record: dict[str, Any] = {
        "command": command_line(getattr(args, "argv", None) or sys.argv[1:]),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "load": _load_dict(load, args.backlog),
        "interval_s": args.interval,
        "nodes": args.nodes,
        "partitions": args.partitions,
        "node_env": node_env,
        "postgres_settings": postgres_settings,
    }
    with contextlib.suppress(Exception):
        from chronos import __version__

        record["machine"]["chronos"] = __version__
    stack = Stack(data_dir, out / "stack", args.partitions, node_env, postgres_settings)
    say(f"[soak] results in {out}")
    status = 0
    with sigterm_interrupts():
        try:
            stack.start()
            record["machine"]["postgres"] = stack.postgres_version()
            _soak(args, stack, load, out, record)
        except (KeyboardInterrupt, Interrupted):
            status = 130
            say("[soak] interrupted; stopping everything")
        except Exception as exc:  # noqa: BLE001 - recorded, then the exit status says it
            status = 1
            record["error"] = str(exc)[:1000]
            say(f"[soak] FAILED: {exc}")
        finally:
            stack.stop()
            if temp_data and not args.keep_data:
                shutil.rmtree(data_dir, ignore_errors=True)
            record["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
            record["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
            (out / SOAK_FILE).write_text(json.dumps(record, indent=2, default=str) + "\n")
    if status or (record.get("harness") or {}).get("returncode"):
        return status or 1
    say("[soak] analysing with Spark")
    analysis = launch(
        ["-m", "loadtest", "soak", "--analyze", str(out), "--master", args.master,
         "--driver-memory", args.driver_memory],
        log_path=out / "analyze.log", env=clean_env(), death_signal=signal.SIGTERM,
    )  # fmt: skip
    code = wait_child(analysis, "the analysis")
    if code != 0:
        say(f"[soak] the analysis exited with {code}; see {out / 'analyze.log'}")
        return 1
    print_verdicts(json.loads((out / "summary.json").read_text()))
    print(out / "report.html")
    return 0


def print_verdicts(summary: dict[str, Any]) -> None:
    for v in summary.get("verdicts", []):
        print(
            f"{v['mark']:5} {v['name']:8} {v['value']}   (target: {v['target']})", file=sys.stderr
        )


def analyze(args: argparse.Namespace) -> int:
    from loadtest.analysis.soak.summary import analyze_soak
    from loadtest.analysis.sparkutil import spark_session

    spark = spark_session(args.master, driver_memory=args.driver_memory)
    try:
        summary = analyze_soak(spark, Path(args.analyze))
    finally:
        spark.stop()
    print_verdicts(summary)
    print(f"analysed in {summary['analysis']['elapsed_s']} s", file=sys.stderr)
    print(Path(args.analyze) / "report.html")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.analyze is not None:
        return analyze(args)
    return run_soak(args)
