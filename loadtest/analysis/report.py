"""``report.html`` and its PNG plots (matplotlib, Agg backend) from a summary dictionary."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

PLOTS = ("lateness_cdf.png", "lateness_hist.png", "throughput.png")
TENANT_PLOT = "tenants.png"  # only for a multi-tenant load (summary["tenants"])


def _edges(dist: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    counts = np.asarray(dist["counts"], dtype=np.float64)
    lo, width = dist["min"], dist["width"]
    upper = lo + (np.arange(len(counts)) + 1) * width - 1  # last value inside each bucket
    return upper, counts


def _markers(ax: Any, summary: dict[str, Any]) -> None:
    advance = summary["timing_advance_ms"]
    limit = summary["sla"]["jitter_limit_ms"]
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvline(-advance, color="tab:green", linestyle="--", linewidth=0.8, label="-timing advance")
    ax.axvline(limit, color="tab:red", linestyle=":", linewidth=0.8, label=f"+{limit} ms")


def plot_cdf(summary: dict[str, Any], path: Path) -> None:
    fig, (ax, tail) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = {"lateness_ms": "fired (publish - deadline)", "receive_lateness_ms": "received"}
    for key, label in labels.items():
        dist = summary["distributions"][key]
        if not dist["counts"]:
            continue
        x, counts = _edges(dist)
        cdf = np.cumsum(counts) / counts.sum()
        ax.step(x, cdf, where="post", label=label)
        ccdf = np.clip(1.0 - cdf, 1e-9, None)
        tail.step(x, ccdf, where="post", label=label)
    for a in (ax, tail):
        _markers(a, summary)
        a.set_xlabel("lateness (ms)")
        a.grid(alpha=0.3)
    ax.set_ylabel("fraction of messages")
    ax.set_title("Lateness CDF")
    tail.set_yscale("log")
    tail.set_ylabel("fraction later than x")
    tail.set_title("Lateness tail (1 - CDF)")
    tail.axhline(0.001, color="grey", linestyle=":", linewidth=0.8)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_histogram(summary: dict[str, Any], path: Path, bins: int = 100) -> None:
    fig, ax = plt.subplots(figsize=(12, 4))
    dist = summary["distributions"]["lateness_ms"]
    if dist["counts"]:
        counts = np.asarray(dist["counts"], dtype=np.float64)
        group = max(1, int(np.ceil(len(counts) / bins)))
        padded = np.pad(counts, (0, (-len(counts)) % group))
        merged = padded.reshape(-1, group).sum(axis=1)
        width = dist["width"] * group
        left = dist["min"] + np.arange(len(merged)) * width
        ax.bar(left, merged, width=width, align="edge", color="tab:blue", edgecolor="none")
        ax.set_yscale("log")
    _markers(ax, summary)
    ax.set_xlabel("lateness = publish - deadline (ms)")
    ax.set_ylabel("messages (log)")
    ax.set_title("Lateness histogram")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_throughput(summary: dict[str, Any], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(12, 4))
    timeline = summary["throughput"]["timeline"]
    if timeline:
        seconds = [row["second"] for row in timeline]
        for kind in ("sent", "due", "fired", "received"):
            ax.plot(seconds, [row[kind] for row in timeline], label=kind, drawstyle="steps-post")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("messages per second")
    ax.set_title("Throughput")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_tenants(tenants: dict[str, Any], path: Path) -> None:
    """Left: p99 lateness per second of deadline, flood vs small tenants (the flood's instant
    and last fire marked). Right: each tenant's p99, the flood's and the small tenants'."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4), gridspec_kw={"width_ratios": [2, 1]})
    colours = {"flood": "tab:red", "small": "tab:blue", "other": "tab:grey"}
    for cls in ("flood", "small", "other"):
        rows = [r for r in tenants["timeline"] if r["class"] == cls and r["p99_ms"] is not None]
        if rows:
            left.plot(
                [r["second"] for r in rows],
                [max(r["p99_ms"], 1.0) for r in rows],
                marker="." if cls == "flood" else None,
                linestyle="" if cls == "flood" else "-",
                drawstyle="steps-post",
                color=colours[cls],
                label=f"{cls} p99",
            )
    drain = tenants.get("flood_drain")
    if drain:
        base = tenants["timeline_base_ms"]
        left.axvline(
            (drain["deadline_ms"] - base) / 1000, color="tab:red", ls=":", lw=1, label="flood due"
        )
        left.axvline(
            (drain["last_fired_ms"] - base) / 1000,
            color="tab:red",
            ls="--",
            lw=1,
            label="flood drained",
        )
    left.set_yscale("log")
    left.set_xlabel("deadline, seconds since start")
    left.set_ylabel("lateness p99 (ms, log; <= 1 ms shown as 1)")
    left.set_title("Lateness by tenant class")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    per = [t for t in tenants["per_tenant"] if t["p99_ms"] is not None]
    per.sort(key=lambda t: (t["class"] != "flood", t["tenant"]))
    right.bar(
        range(len(per)),
        [max(t["p99_ms"], 1.0) for t in per],
        color=[colours.get(t["class"], "tab:grey") for t in per],
    )
    right.set_yscale("log")
    right.axhline(1000, color="black", ls=":", lw=1, label="1 s")
    right.set_xticks(range(len(per)), [t["tenant"] for t in per], rotation=90, fontsize=6)
    right.set_ylabel("lateness p99 (ms, log)")
    right.set_title("p99 per tenant")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _tenant_sections(tenants: dict[str, Any], out: Path) -> list[str]:
    plot_tenants(tenants, out / TENANT_PLOT)
    summary = {
        f"{cls} {k}": v for cls, figures in tenants["classes"].items() for k, v in figures.items()
    }
    for name in ("small_during_flood", "flood_drain", "small_worst"):
        for k, v in (tenants.get(name) or {}).items():
            summary[f"{name} {k}"] = v
    return [_table("Tenants (lateness in ms)", summary), image_html(out / TENANT_PLOT)]


def _table(title: str, items: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v))}</td></tr>"
        for k, v in items.items()
        if not isinstance(v, dict | list) or k in ("lost_sample", "dead_letter_reasons")
    )
    return f"<h2>{html.escape(title)}</h2><table>{rows}</table>"


def image_html(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    name = html.escape(path.name)
    return f'<p><a href="{name}"><img alt="{name}" src="data:image/png;base64,{data}"></a></p>'


def write_report(summary: dict[str, Any], out: Path) -> Path:
    """Write the plots and a self-contained ``report.html`` (plots embedded and linked)."""
    out.mkdir(parents=True, exist_ok=True)
    plot_cdf(summary, out / PLOTS[0])
    plot_histogram(summary, out / PLOTS[1])
    plot_throughput(summary, out / PLOTS[2])
    timeline = summary["throughput"]["timeline"]
    throughput = {k: v for k, v in summary["throughput"].items() if k != "timeline"}
    throughput["seconds"] = len(timeline)
    sections = [
        _table("Parameters", summary.get("params") or {}),
        _table("Counts", summary["counts"]),
        _table("Lateness (ms), " + summary["percentile_method"], summary["lateness_ms"]),
        _table("Receive lateness (ms)", summary["receive_lateness_ms"]),
        _table("Early firing", summary["early"]),
        _table("SLA", summary["sla"]),
        _table("Throughput", throughput),
        _table("Producer pacing", summary["producer"]),
        "".join(image_html(out / name) for name in PLOTS),
    ]
    if summary.get("tenants"):
        sections += _tenant_sections(summary["tenants"], out)
    title = f"Chronos load test {summary.get('run_id') or ''}".strip()
    return write_page(out, title, sections)


def write_page(out: Path, title: str, sections: list[str]) -> Path:
    """The one-page HTML report (``out/report.html``): a title, then the sections in order."""
    doc = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
th, td {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; font-size: 90%; }}
img {{ max-width: 100%; }}
</style></head>
<body><h1>{html.escape(title)}</h1>
{"".join(sections)}
</body></html>
"""
    path = out / "report.html"
    path.write_text(doc)
    return path
