"""The ``bench`` command: its arguments, the run of every scenario with the stack started and
stopped around them, ``--render`` of an earlier run, and the outputs (bench.json, BENCHMARK.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from chronos.embedded.kafka.jars import kafka_version
from loadtest.bench import scenarios as sc
from loadtest.bench.catchup import run_catchup_scenario
from loadtest.bench.evaluation import capacity, evaluate, run_ceiling
from loadtest.bench.figures import received_gaps
from loadtest.bench.procstats import cpu_model, memory_total_kb
from loadtest.bench.promtext import node_metrics
from loadtest.bench.records import BenchRecord, ScenarioRecord, rows_as_dicts
from loadtest.bench.report import one_line, print_table, render_markdown
from loadtest.bench.results.cpu import CpuUsage, per_core
from loadtest.bench.results.jsonread import json_int, json_map
from loadtest.bench.runs import Context, Interrupted, run_ceiling_scenario, run_load_scenario, say
from loadtest.bench.stack import POSTGRES_SETTINGS, REPO, Stack, Topics, read_text
from loadtest.bench.warmup import warm_broker

DEFAULT_RESULTS = Path("loadtest/results")


def machine_facts() -> dict[str, Any]:
    mem_kb = memory_total_kb()
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "broker": f"Apache Kafka {kafka_version()} (embedded, one node: broker and controller)",
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return head.strip() + (" (with uncommitted changes)" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def command_line(argv: Sequence[str]) -> str:
    python = sys.executable
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(python, Path.cwd())
        if not rel.startswith(".."):
            python = rel
    return f"{python} -m loadtest {shlex.join(argv)}"


def write_outputs(out: Path, bench: dict[str, Any]) -> None:
    """Judge the run recorded in ``bench`` (the content of bench.json, updated in place with
    the targets, the headline and each scenario's per-core figures) and write bench.json and
    BENCHMARK.md."""
    for rec in bench.get("scenarios", []):
        figures = per_core(
            CpuUsage.from_dict(json_map(rec, "cpu")),
            json_int(json_map(rec, "cpu_per_message"), "messages"),
        )
        if figures is not None:
            rec["per_core"] = figures.as_dict()
    record = BenchRecord.from_dict(bench)
    targets = evaluate(record)
    cap, source = capacity(record)
    ceiling = run_ceiling(record)
    bench["targets"] = rows_as_dicts(targets)
    bench["headline"] = {
        "ceiling_msg_per_s": ceiling,
        "sustained_msg_per_s": cap,
        "sustained_source": source,
        "ratio_to_ceiling": round(cap / ceiling, 3) if cap and ceiling else None,
        "targets_passed": sum(1 for r in targets if r.ok is True),
        "targets_failed": sum(1 for r in targets if r.ok is False),
    }
    (out / "bench.json").write_text(json.dumps(bench, indent=2, default=str) + "\n")
    (out / "BENCHMARK.md").write_text(render_markdown(replace(record, targets=targets)))


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_bench(args: argparse.Namespace) -> int:
    names = sc.parse_names(args.scenarios)
    runs = sc.plan(names, quick=args.quick)
    out = Path(args.out or DEFAULT_RESULTS / datetime.now().strftime("bench-%Y%m%d-%H%M%S"))
    out = out.absolute()
    if out.exists() and any(out.iterdir()):
        raise RuntimeError(f"output directory {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    temp_data = args.data_dir is None
    if temp_data:
        data_dir = Path(tempfile.mkdtemp(prefix="chronos-bench-"))
        data_dir.chmod(0o755)  # Postgres runs as its own system user when we are root
    else:
        data_dir = Path(args.data_dir).absolute()
        if data_dir.exists() and any(data_dir.iterdir()):
            raise RuntimeError(f"data directory {data_dir} is not empty")
        data_dir.mkdir(parents=True, exist_ok=True)
    node_env = dict(args.node_env or [])
    bad = [k for k in node_env if not k.startswith("CHRONOS_")]
    if bad:
        raise RuntimeError(f"--node-env takes CHRONOS_* variables, not {bad[0]}")
    postgres_settings = {**POSTGRES_SETTINGS, **dict(args.postgres_setting or [])}
    logs = out / "stack"
    logs.mkdir()
    bench: dict[str, Any] = {
        "command": command_line(getattr(args, "argv", None) or sys.argv[1:]),
        "quick": bool(args.quick),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "scenario_plan": [s.name for s in runs],
        "machine": machine_facts(),
        "scenarios": [],
    }
    bench["machine"]["commit"] = _commit()
    with contextlib.suppress(Exception):
        from chronos import __version__

        bench["machine"]["chronos"] = __version__
    started = time.monotonic()
    stack = Stack(data_dir, logs, args.partitions, node_env, postgres_settings, args.shards)
    ctx = Context(out, stack, args.quick, set(args.profile or []), args.profile_seconds)
    failures = 0
    interrupted = False
    say(f"results in {out}")
    with sigterm_interrupts():
        try:
            servers = f"{args.shards} Postgres servers" if args.shards > 1 else "Postgres"
            say(f"starting {servers} (durable) and the broker in {data_dir}")
            stack.start()
            bench["machine"]["postgres"] = stack.postgres_version()
            settings = stack.node_settings(Topics("i", "o", "d", "g"))
            bench["stack"] = {
                "postgres_durable": True,
                "postgres_settings": postgres_settings,
                "partitions": args.partitions,
                "shards": args.shards,
                "node_env": node_env,
                "node_settings_summary": (
                    f"advance {settings.timing_advance_ms} ms, lookahead {settings.lookahead_ms}"
                    f" ms, poll {settings.poll_interval_ms} ms, batches "
                    f"{settings.consume_batch_size}/{settings.claim_batch_size}, max in flight "
                    f"{settings.max_in_flight}"
                ),
            }
            ceiling: float | None = None
            warm = not any(s.kind != "ceiling" for s in runs)
            for scenario in runs:
                if not warm and scenario.kind != "ceiling":
                    bench["stack"]["broker_warmup"] = warm_broker(ctx)
                    write_outputs(out, bench)
                    warm = True
                try:
                    if scenario.kind == "ceiling":
                        rec = run_ceiling_scenario(ctx, scenario)
                        if scenario.name == "ceiling":
                            ceiling = rec["result"]["ceiling_msg_per_s"]
                    elif scenario.kind == "catchup":
                        rec = run_catchup_scenario(ctx, scenario)
                    else:
                        rec = run_load_scenario(ctx, scenario, ceiling)
                    if scenario.kind != "ceiling":
                        say(f"[{scenario.name}] {one_line(ScenarioRecord.from_dict(rec))}")
                except (KeyboardInterrupt, Interrupted):
                    raise
                except Exception as exc:  # noqa: BLE001 - record it, go on with the next
                    failures += 1
                    rec = {**scenario.as_dict(), "status": "failed", "error": str(exc)[:500]}
                    say(f"[{scenario.name}] FAILED: {exc}")
                    with contextlib.suppress(Exception):
                        stack.stop_nodes()
                bench["scenarios"].append(rec)
                write_outputs(out, bench)
        except (KeyboardInterrupt, Interrupted):
            interrupted = True
            say("interrupted; stopping everything")
        finally:
            stack.stop()
            if temp_data and not args.keep_data:
                shutil.rmtree(data_dir, ignore_errors=True)
            bench["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
            bench["elapsed_s"] = round(time.monotonic() - started, 1)
            bench["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
            bench["interrupted"] = interrupted
            write_outputs(out, bench)
    print_table(BenchRecord.from_dict(bench))
    print(out / "BENCHMARK.md")
    if interrupted:
        return 130
    return 1 if failures else 0


def env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def _scenario_list(text: str) -> str:
    try:
        sc.parse_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _profile_list(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        type=_scenario_list,
        default=None,
        help=f"comma-separated, from {','.join(sc.SCENARIO_NAMES)} (default "
        f"{','.join(sc.DEFAULT_SCENARIOS)}); the ceiling always runs first",
    )
    parser.add_argument(
        "--quick", action="store_true", help="shrunken scenarios: a smoke test of a few minutes"
    )
    parser.add_argument(
        "--out", type=Path, help="results directory (default loadtest/results/bench-<timestamp>)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="Postgres cluster and broker data (default: a new temporary directory, removed "
        "at the end)",
    )
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic")
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="Postgres servers, one per shard (docs/shards.md): the input partitions spread "
        "over them (map mod); Postgres's CPU and statements are every shard's, added up",
    )
    parser.add_argument(
        "--node-env",
        action="append",
        type=env_pair,
        metavar="CHRONOS_NAME=VALUE",
        help="a setting for every node (repeatable), e.g. CHRONOS_CLAIM_BATCH_SIZE=5000",
    )
    parser.add_argument(
        "--postgres-setting",
        action="append",
        type=env_pair,
        metavar="NAME=VALUE",
        help="a server setting of the benchmark's Postgres (repeatable), over the defaults "
        + ", ".join(f"{k}={v}" for k, v in POSTGRES_SETTINGS.items())
        + " (the server's own: shared_buffers=128MB, max_wal_size=1GB)",
    )
    parser.add_argument(
        "--profile",
        type=_profile_list,
        default=[],
        metavar="SCENARIOS",
        help="profile node 0 with py-spy during these scenarios (comma-separated)",
    )
    parser.add_argument(
        "--profile-seconds", type=float, default=20.0, help="length of each profile"
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="DIR",
        help="run nothing: re-evaluate the targets of an earlier run's DIR/bench.json and "
        "rewrite its bench.json and BENCHMARK.md",
    )


def render(out: Path) -> int:
    """Re-evaluate an existing results directory (after a change to the evaluation)."""
    bench = json.loads((out / "bench.json").read_text())
    for rec in bench.get("scenarios", []):
        sdir = out / rec.get("name", "")
        figures = ScenarioRecord.from_dict(rec)
        lost = figures.counts.lost
        received = sdir / "events" / "received.parquet"
        if lost and "output_gaps" not in rec and received.exists():
            gaps = received_gaps(received)
            rec["output_gaps"] = None if gaps is None else gaps.as_dict()
        after = sorted(sdir.glob("metrics-node*.txt"))
        before = [sdir / p.name.replace("metrics-", "metrics-before-") for p in after]
        cpu = figures.cpu
        if after and cpu is not None:
            complete = all(p.exists() for p in before)
            nm = node_metrics(
                [read_text(str(p)) or "" for p in before] if complete else [""] * len(after),
                [read_text(str(p)) or "" for p in after],
                float(cpu.wall_s or 0) or 1.0,
            )
            # Without the scrapes taken before the load (older runs) only the lateness
            # histogram is recomputed: the nodes fired nothing before the load, but they did
            # claim and count.
            rec["node_lateness"] = nm.node_lateness.as_dict()
            if complete:
                rec.update(claim=nm.claim.as_dict(), statements=nm.statements_dict())
                rec["node_counters"] = dict(nm.counters)
    write_outputs(out, bench)
    print_table(BenchRecord.from_dict(bench))
    print(out / "BENCHMARK.md")
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "render", None) is not None:
        return render(Path(args.render))
    return run_bench(args)
