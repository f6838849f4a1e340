"""What a load's run left, read after it: the analysis of its events, where lost messages
went (output gaps, rows left, the input topic), its files and the stack's timeline."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadtest.analysis.delivery import STORED_COUNT_SQL, locate_loss
from loadtest.bench.context import Context, say, wait_child
from loadtest.bench.figures import received_gaps
from loadtest.bench.input_audit import audit_input
from loadtest.bench.results.samples import StackSample
from loadtest.bench.scenarios import Scenario
from loadtest.bench.stack import Stack, Topics, clean_env, launch


def analyse(
    ctx: Context, name: str, events: Path, sdir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``python -m loadtest analyze`` on the recorded events: its summary and the run.json."""
    analyze_argv = [
        "-m",
        "loadtest",
        "analyze",
        str(events),
        "--out",
        str(sdir),
        "--driver-memory",
        ctx.analyze_memory,
    ]
    analysis = launch(
        analyze_argv, log_path=sdir / "analyze.log", env=clean_env(), death_signal=signal.SIGTERM
    )
    acode = wait_child(analysis, f"the analysis of {name}")
    if acode != 0:
        raise RuntimeError(f"the analysis exited with {acode}; see {sdir / 'analyze.log'}")
    summary = json.loads((sdir / "summary.json").read_text())
    run = json.loads((events / "run.json").read_text())
    return summary, run


def stored_rows(stack: Stack, run_id: str) -> int | None:
    """Rows of run ``run_id`` in the table (None if the count failed)."""
    try:
        counts = stack.sql_each(STORED_COUNT_SQL, {"prefix": f"{run_id}-"})
        return sum(int(rows[0][0]) for rows in counts)  # every shard's
    except Exception:  # noqa: BLE001 - a diagnostic; the other figures stand without it
        return None


STORED_IDS_SQL = "SELECT id FROM chronos_messages WHERE starts_with(id, %(prefix)s)"


def audit_missing(
    rec: dict[str, Any],
    stack: Stack,
    topics: Topics,
    summary: dict[str, Any],
    run: dict[str, Any],
    sdir: Path,
) -> None:
    """When messages are missing (lost, or the intake load's rows absent from the table): does
    the input topic hold them, and where (``input_audit``)."""
    missing = [str(i) for i in (summary.get("counts") or {}).get("lost_sample") or []]
    runs = {str(run.get("run_id")): int(run.get("producer", {}).get("sent") or 0)}
    background = rec.get("background") or {}
    sent, stored = int(background.get("sent") or 0), background.get("stored")
    if sent and stored is not None and stored < sent:
        bg_id = str(json.loads((sdir / "background" / "run.json").read_text()).get("run_id"))
        runs[bg_id] = sent
        shards = stack.sql_each(STORED_IDS_SQL, {"prefix": f"{bg_id}-"})
        held = {str(r[0]) for rows in shards for r in rows}
        missing += [i for i in (f"{bg_id}-{n}" for n in range(sent)) if i not in held][:1000]
    if missing:
        rec["input_audit"] = audit_input(
            stack.bootstrap, topics.input, stack.partitions, runs, missing
        )
        say(
            f"[{rec.get('name')}] input audit: {rec['input_audit']['missing_held']} of the "
            f"missing messages are in the input topic, "
            f"{rec['input_audit']['missing_not_held']} are not"
        )


def locate_lost(rec: dict[str, Any], stack: Stack, run: dict[str, Any], events: Path) -> None:
    """When messages were lost: holes in the output offsets, rows still in the table."""
    lost = int(rec["summary"]["counts"].get("lost") or 0)
    if lost and not run.get("consumer", {}).get("foreign_records"):
        gaps = received_gaps(events / "received.parquet")
        rec["output_gaps"] = None if gaps is None else gaps.as_dict()
    if lost:
        rec["loss_location"] = locate_loss(
            lost, _every_shard(stack), str(run.get("run_id")), rec.get("output_gaps")
        ).as_dict()


def _every_shard(stack: Stack) -> Callable[[str, dict[str, Any]], list[Any]]:
    """``locate_loss``'s statements over every shard: the count added up, the ids merged."""

    def sql(statement: str, params: dict[str, Any]) -> list[Any]:
        results = stack.sql_each(statement, params)
        if statement == STORED_COUNT_SQL:
            return [(sum(int(rows[0][0]) for rows in results),)]
        return sorted(row for rows in results for row in rows)[:10]

    return sql


def scenario_files(name: str, sdir: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for label, filename in (
        ("report", "report.html"),
        ("summary", "summary.json"),
        ("lateness CDF", "lateness_cdf.png"),
        ("lateness histogram", "lateness_hist.png"),
        ("throughput", "throughput.png"),
        ("samples", "samples.json"),
        ("profile", "profile-node0.txt"),
        ("intake profile", "profile-intake0.txt"),
        ("load generator log", "harness.log"),
    ):
        if (sdir / filename).exists():
            files[label] = f"{name}/{filename}"
    if (sdir / "relay.log").exists():
        files["relay log"] = f"{name}/relay.log"
    for log in sorted(sdir.glob("node-*.log")):
        files[log.stem + " log"] = f"{name}/{log.name}"
    for stall in sorted(sdir.glob("stall-node*.txt")):
        files[stall.stem] = f"{name}/{stall.name}"
    return files


def plot_stack(
    path: Path, samples: Sequence[StackSample], run: dict[str, Any], scenario: Scenario
) -> None:
    if not samples:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    start = int(run.get("start_ms") or samples[0].t_ms)
    end = run.get("producer", {}).get("end_ms")
    xs = [(s.t_ms - start) / 1000 for s in samples]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    series: tuple[tuple[str, Callable[[StackSample], float | None]], ...] = (
        ("waiting rows", lambda s: None if s.table is None else s.table.waiting),
        ("claimed rows", lambda s: None if s.table is None else s.table.claimed),
        ("overdue rows", lambda s: s.overdue),
        ("consumer lag", lambda s: s.consumer_lag),
    )
    for label, value in series:
        ys = [value(s) for s in samples]
        if any(y is not None for y in ys):
            ax.plot(xs, [float("nan") if y is None else y for y in ys], label=label)
    ax.set_xlabel("seconds since the first send")
    ax.set_ylabel("messages")
    if end:
        ax.axvline((int(end) - start) / 1000, color="grey", linestyle="--", linewidth=1)
    ax2 = ax.twinx()
    for i in range(scenario.nodes):
        ys = [s.rss_mb.get(i) for s in samples]
        ax2.plot(
            xs,
            [float("nan") if y is None else y for y in ys],
            linestyle=":",
            label=f"node {i} memory MB (PSS)",
        )
    ax2.set_ylabel("memory MB (PSS)")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(handles, labels, loc="upper left", fontsize="small")
    ax.set_title(f"{scenario.name}: table, lag and node memory (dashed: end of sending)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
