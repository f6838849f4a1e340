"""The soak's one-page ``report.html`` and its PNG plots (matplotlib, Agg), from the summary:
the verdicts first, then each series over time, minute by minute."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from loadtest.analysis.report import image_html, plot_cdf, write_page

Row = dict[str, Any]
PLOTS = (
    "lateness.png",
    "throughput.png",
    "memory.png",
    "cpu.png",
    "table.png",
    "wal.png",
    "kafka.png",
    "lateness_cdf.png",
)


def _series(
    ax: Any, rows: Sequence[Row], key: str, label: str, scale: float = 1.0, **style: Any
) -> bool:
    points = [(r["x"], r[key] * scale) for r in rows if r.get(key) is not None]
    if not points:
        return False
    ax.plot([p[0] for p in points], [p[1] for p in points], label=label, **style)
    return True


def _frame(summary: dict[str, Any], title: str, ylabel: str) -> tuple[Any, Any]:
    fig, ax = plt.subplots(figsize=(11, 3.6))
    w = summary["windows"]
    start = w["start_ms"]
    for lo, hi in (w["first"], w["last"]):
        ax.axvspan((lo - start) / 60_000, (hi - start) / 60_000, color="grey", alpha=0.12)
    ax.axvline((w["end_ms"] - start) / 60_000, color="grey", ls="--", lw=1)
    ax.set_title(f"{title} (shaded: the compared windows; dashed: end of sending)", fontsize=10)
    ax.set_xlabel("minutes since the first send")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _save(fig: Any, ax: Any, path: Path, *twins: Any) -> None:
    handles, labels = ax.get_legend_handles_labels()
    for twin in twins:
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    if handles:
        ax.legend(handles, labels, fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _plot_lateness(summary: dict[str, Any], path: Path) -> None:
    rows = summary["per_minute"]["lateness"]
    bucket = summary["per_minute"]["bucket_s"]
    each = "minute" if bucket == 60 else f"{bucket} s"
    fig, ax = _frame(summary, f"Lateness of the messages due in each {each}", "ms (symlog)")
    for key, label in (
        ("p50_ms", "p50"),
        ("p99_ms", "p99"),
        ("p99_9_ms", "p99.9"),
        ("max_ms", "max"),
    ):
        _series(ax, rows, key, label, marker=".")
    ax.set_yscale("symlog", linthresh=10)
    ax.axhline(50, color="tab:red", ls=":", lw=1, label="50 ms")
    _save(fig, ax, path)


def _plot_throughput(summary: dict[str, Any], path: Path) -> None:
    rows = summary["per_minute"]["lateness"]
    samples = summary["per_minute"]["samples"]
    fig, ax = _frame(summary, "Fires per second", "msg/s")
    per_s = 1 / summary["per_minute"]["bucket_s"]
    _series(ax, rows, "planned", "planned (by time sent)", per_s)
    _series(ax, rows, "fired", "fired (by deadline)", per_s)
    _series(ax, samples, "fired_per_s", "fired (nodes' counter)", ls=":")
    _save(fig, ax, path)


def _nodes(rows: Sequence[Row], prefix: str) -> list[str]:
    return sorted({k for r in rows for k in r if k.startswith(prefix)})


def _plot_memory(summary: dict[str, Any], path: Path) -> None:
    rows = summary["per_minute"]["samples"]
    fig, ax = _frame(summary, "Node memory (PSS of its processes)", "MB")
    for key in _nodes(rows, "pss_mb_"):
        _series(ax, rows, key, f"node {key.removeprefix('pss_mb_')}", marker=".")
    _save(fig, ax, path)


def _plot_cpu(summary: dict[str, Any], path: Path) -> None:
    rows = summary["per_minute"]["samples"]
    fig, ax = _frame(summary, "CPU", "cores")
    for key in _nodes(rows, "cores_"):
        _series(ax, rows, key, f"node {key.removeprefix('cores_')}")
    _series(ax, rows, "postgres_cores", "Postgres")
    _series(ax, rows, "broker_cores", "broker")
    _series(ax, rows, "load_generator_cores", "load generator", ls="--")
    _series(ax, rows, "machine_cores", "the whole machine", color="black", ls=":")
    _save(fig, ax, path)


def _plot_table(summary: dict[str, Any], path: Path) -> None:
    rows = summary["per_minute"]["samples"]
    fig, ax = _frame(summary, "chronos_messages", "MB")
    _series(ax, rows, "total_mb", "table + indexes MB")
    _series(ax, rows, "index_mb", "indexes MB")
    twin = ax.twinx()
    _series(twin, rows, "live_rows", "live rows", ls=":", color="tab:green")
    _series(twin, rows, "dead_rows", "dead rows", ls=":", color="tab:red")
    for row in rows:
        if row.get("autovacuum_runs"):
            ax.axvline(row["x"], color="tab:purple", lw=0.6, alpha=0.6)
    twin.set_ylabel("rows (purple: an autovacuum)")
    _save(fig, ax, path, twin)


def _plot_wal(summary: dict[str, Any], path: Path) -> None:
    _plot_pair(summary, path, "WAL", ("MB per minute", "wal_mb", "WAL MB"),
               ("bytes per row change", "wal_per_row_change", "bytes per row change"))  # fmt: skip


def _plot_kafka(summary: dict[str, Any], path: Path) -> None:
    _plot_pair(summary, path, "Broker log and consumer lag",
               ("broker log MB", "broker_log_mb", "broker log MB"),
               ("messages", "consumer_lag", "consumer lag (largest)"))  # fmt: skip


def _plot_pair(
    summary: dict[str, Any],
    path: Path,
    title: str,
    left: tuple[str, str, str],
    right: tuple[str, str, str],
) -> None:
    """One sampled series on the left axis, another (dotted) on the right: each (axis label,
    sample key, legend label)."""
    rows = summary["per_minute"]["samples"]
    fig, ax = _frame(summary, title, left[0])
    _series(ax, rows, left[1], left[2])
    twin = ax.twinx()
    _series(twin, rows, right[1], right[2], ls=":", color="tab:red")
    twin.set_ylabel(right[0])
    _save(fig, ax, path, twin)


PLOTTERS: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "lateness.png": _plot_lateness,
    "throughput.png": _plot_throughput,
    "memory.png": _plot_memory,
    "cpu.png": _plot_cpu,
    "table.png": _plot_table,
    "wal.png": _plot_wal,
    "kafka.png": _plot_kafka,
}


def _rows(items: dict[str, Any]) -> str:
    return "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v, default=str))}</td></tr>"
        for k, v in items.items()
        if not isinstance(v, dict | list)
    )


def _verdict_table(verdicts: Sequence[Row]) -> str:
    colour = {"PASS": "#d4edda", "FAIL": "#f8d7da", "n/a": "#eee"}
    body = "".join(
        f'<tr style="background:{colour[v["mark"]]}"><th>{html.escape(v["name"])}</th>'
        f"<td><b>{v['mark']}</b></td><td>{html.escape(v['target'])}</td>"
        f"<td>{html.escape(v['value'])}</td></tr>"
        for v in verdicts
    )
    return (
        "<h2>Verdicts</h2><table><tr><th>check</th><th></th><th>target</th><th>measured</th>"
        f"</tr>{body}</table>"
    )


def write_report(summary: dict[str, Any], out: Path) -> Path:
    """Write the plots and a self-contained ``report.html`` (plots embedded and linked)."""
    per_minute = summary["per_minute"]
    half = per_minute["bucket_s"] / 120  # each row is plotted at the middle of its bucket
    view = {
        **summary,
        "per_minute": {
            **per_minute,
            "lateness": [{**r, "x": r["minute"] + half} for r in per_minute["lateness"]],
            "samples": [{**r, "x": r["minute"] + half} for r in per_minute["samples"]],
        },
    }
    for name, plot in PLOTTERS.items():
        plot(view, out / name)
    plot_cdf(summary["run"], out / "lateness_cdf.png")
    run = summary["run"]
    counts = {k: v for k, v in run["counts"].items() if k != "lost_sample"}
    late = {k: v for k, v in run["lateness_ms"].items() if k != "basis"}
    soak = summary.get("soak") or {}
    sections = [
        f"<p><code>{html.escape(str(summary.get('command') or ''))}</code></p>",
        f"<p>{html.escape(str(soak.get('describe') or ''))}</p>",
        _verdict_table(summary["verdicts"]),
        f"<p>Windows: {html.escape(summary['windows']['basis'])}, "
        f"{summary['windows']['seconds']:g} s each.</p>",
        "<h2>Whole run</h2><table>"
        + _rows(counts)
        + _rows(summary["never_fire"])
        + _rows({f"not applied ({k})": v for k, v in summary.get("not_applied", {}).items()})
        + "</table>",
        "<h2>Lateness (ms, whole run)</h2><table>" + _rows(late) + "</table>",
        "<h2>The drain</h2><table>" + _rows(summary.get("drain") or {}) + "</table>",
        "".join(image_html(out / name) for name in PLOTS),
        "<h2>The load</h2><table>" + _rows(soak) + _rows(summary.get("mix") or {}) + "</table>",
    ]
    title = f"Chronos soak {summary.get('run_id') or ''}".strip()
    return write_page(out, title, sections)
