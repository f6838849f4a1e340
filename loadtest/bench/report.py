"""``BENCHMARK.md`` and the summaries printed on stderr."""

from __future__ import annotations

import sys
from typing import Any

from loadtest.bench.evaluation import by_kind, capacity, ceiling_rate, fmt, lookup, ran_ok
from loadtest.bench.sampling import STALL_SECONDS


def _pass_text(ok: bool | None) -> str:
    return {True: "**pass**", False: "**FAIL**", None: "—"}[ok]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(bench: dict[str, Any]) -> str:
    """BENCHMARK.md: headline, targets, scenario details, machine facts and links."""
    lines: list[str] = ["# Chronos benchmark", ""]
    if bench.get("quick"):
        lines += [
            "> **Quick mode**: a smoke test with shrunken scenarios, not the headline benchmark.",
            "",
        ]
    ceiling = ceiling_rate(bench)
    cap, source = capacity(bench)
    if cap and ceiling:
        kind = "capacity" if source == "saturate" else "sustained rate (offered-limited)"
        lines.append(
            f"**One Chronos node: {cap:,.0f} msg/s {kind} = {cap / ceiling:.2f} x the ceiling "
            f"({ceiling:,.0f} msg/s, the raw SQL pipeline measured in the same run on the same "
            "Postgres).**"
        )
        sustained = next(iter(by_kind(bench, "sustained")), None)
        fired = lookup(sustained, "steady", "fired_per_s") if ran_ok(sustained) else None
        if fired and source != "sustained":
            lines.append(
                f"At the 10,000 msg/s target load it fired {fired:,.0f} msg/s "
                f"({fired / ceiling:.2f} x the ceiling)."
            )
        lines.append("")
    lines += [
        f"Command: `{bench.get('command', '')}`  ",
        f"Started {bench.get('started', '?')}, finished {bench.get('ended', '?')} "
        f"({fmt(bench.get('elapsed_s'), 0)} s).",
        "",
        "## Targets",
        "",
        "| scenario | target | measured | result |",
        "|---|---|---|---|",
    ]
    for row in bench.get("targets", []):
        measured = row["measured"] + (f" ({row['note']})" if row.get("note") else "")
        lines.append(
            f"| {row['scenario']} | {_md_escape(row['target'])} | "
            f"{_md_escape(measured)} | {_pass_text(row['pass'])} |"
        )
    lines += ["", "## Scenarios", ""]
    lines += [
        "| scenario | nodes | load | sent | fired | lost | late after window | dup ids | "
        "lateness p50 / p99 / p99.9 / max ms | early | steady fired/s | claim mean / p99 ms | "
        "node RSS max MB | node CPU s | backlog |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in bench.get("scenarios", []):
        if rec.get("kind") == "ceiling":
            continue
        if not ran_ok(rec):
            lines.append(
                f"| {rec['name']} | {rec.get('nodes')} | {rec.get('load', '')} | "
                f"{_md_escape(rec.get('error') or rec.get('status', ''))} |" + " |" * 11
            )
            continue
        counts = lookup(rec, "summary", "counts") or {}
        late = lookup(rec, "summary", "lateness_ms") or {}
        claim = rec.get("claim") or {}
        growing = lookup(rec, "backlog", "growing")
        lines.append(
            "| "
            + " | ".join(
                [
                    rec["name"],
                    str(rec.get("nodes")),
                    rec.get("load", ""),
                    fmt(counts.get("sent")),
                    fmt(counts.get("fired_distinct")),
                    fmt(counts.get("lost")),
                    fmt(lookup(rec, "summary", "delivery", "late_after_window")),
                    fmt(counts.get("duplicate_ids")),
                    " / ".join(fmt(late.get(k)) for k in ("p50", "p99", "p99_9", "max")),
                    fmt(lookup(rec, "summary", "early", "early_count")),
                    fmt(lookup(rec, "steady", "fired_per_s")),
                    f"{fmt(claim.get('mean_ms'), 2)} / {fmt(claim.get('p99_ms'), 2)}",
                    fmt(rec.get("rss_max_mb"), 0),
                    fmt(lookup(rec, "cpu", "nodes_s")),
                    {True: "grew", False: "flat", None: "—"}[growing],
                ]
            )
            + " |"
        )
    lines += [
        "",
        "CPU seconds per component during each load (the machine is shared: *other* is "
        "every process that is not part of the benchmark):",
        "",
        "| scenario | wall s | nodes | postgres | broker | load generator | other | machine busy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in bench.get("scenarios", []):
        cpu = rec.get("cpu")
        if not cpu:
            continue
        lines.append(
            "| "
            + " | ".join(
                [rec["name"]]
                + [
                    fmt(cpu.get(k))
                    for k in (
                        "wall_s",
                        "nodes_s",
                        "postgres_s",
                        "broker_s",
                        "harness_s",
                        "other_s",
                        "machine_busy_s",
                    )
                ]
            )
            + " |"
        )
    stalled = [r for r in bench.get("scenarios", []) if r.get("stalls")]
    if stalled:
        lines += ["", "### Stalls", ""]
        for rec in stalled:
            for stall in rec["stalls"]:
                lines.append(
                    f"- **{rec['name']}**: node {stall['node']} fired nothing for "
                    f"{STALL_SECONDS:.0f} s while {fmt(stall.get('overdue'))} rows were overdue; "
                    f"thread stacks and database sessions in [{stall['file']}]"
                    f"({rec['name']}/{stall['file']})."
                )
    extra = [r for r in bench.get("scenarios", []) if r.get("kind") in ("burst", "backlog")]
    if extra:
        lines += ["", "### Burst and backlog", ""]
        for rec in extra:
            if rec.get("kind") == "burst" and rec.get("drain"):
                d, intake = rec["drain"], rec.get("intake") or {}
                lines.append(
                    f"- **{rec['name']}**: {fmt(d.get('count'))} messages fired in "
                    f"{fmt(d.get('seconds'), 2)} s from the first fire to the last = "
                    f"{fmt(d.get('rate_per_s'))} msg/s; all stored "
                    f"{fmt(intake.get('stored_after_s'))} s after the first send "
                    f"({fmt(intake.get('rate_per_s'))} msg/s intake); "
                    f"{fmt(lookup(rec, 'node_counters', 'published_directly'))} published "
                    "directly."
                )
            if rec.get("kind") == "backlog":
                pre = rec.get("preload") or {}
                lines.append(
                    f"- **{rec['name']}**: {fmt(pre.get('rows'))} rows pre-loaded in "
                    f"{fmt(pre.get('seconds'))} s ({fmt(pre.get('table_mb'), 0)} MB table + "
                    f"indexes); claims {fmt(lookup(rec, 'claim', 'count'))}, "
                    f"{fmt(lookup(rec, 'claim', 'rows_per_claim'))} rows each."
                )
    machine = bench.get("machine", {})
    lines += ["", "## Machine", ""]
    for key, label in (
        ("cpu_model", "CPU"),
        ("cores", "cores"),
        ("memory_gb", "memory GB"),
        ("loadavg_start", "load average at start (1, 5, 15 min)"),
        ("loadavg_end", "load average at end"),
        ("kernel", "kernel"),
        ("python", "Python"),
        ("postgres", "Postgres"),
        ("chronos", "Chronos"),
        ("commit", "commit"),
    ):
        value = machine.get(key)
        if isinstance(value, list):
            value = ", ".join(f"{v:.2f}" for v in value)
        lines.append(f"- {label}: {value if value is not None else 'n/a'}")
    stack = bench.get("stack", {})
    if stack:
        lines.append(
            f"- stack: Postgres durable={stack.get('postgres_durable')}, "
            f"{stack.get('partitions')} partitions per topic, node settings "
            f"{stack.get('node_settings_summary', '')}"
        )
    lines += ["", "## Reports", ""]
    for rec in bench.get("scenarios", []):
        files = rec.get("files") or {}
        links = [f"[{label}]({path})" for label, path in files.items()]
        if links:
            lines.append(f"- {rec['name']}: " + ", ".join(links))
    profiles = [r for r in bench.get("scenarios", []) if r.get("profile")]
    if profiles:
        lines += ["", "## Profiles", ""]
        for rec in profiles:
            prof = rec["profile"]
            lines += [
                f"### {rec['name']} (node 0, {prof['samples']} samples holding the GIL)",
                "",
                "| self % | total % | function |",
                "|---|---|---|",
            ]
            totals = {i["function"]: i["percent"] for i in prof["total"]}
            for item in prof["self"][:15]:
                lines.append(
                    f"| {item['percent']} | {totals.get(item['function'], '')} | "
                    f"`{_md_escape(item['function'])}` |"
                )
            lines.append("")
    return "\n".join(lines) + "\n"


def one_line(rec: dict[str, Any]) -> str:
    if rec.get("kind") == "ceiling":
        return f"{rec['result']['ceiling_msg_per_s']:,.0f} msg/s"
    late = lookup(rec, "summary", "lateness_ms") or {}
    counts = lookup(rec, "summary", "counts") or {}
    parts = [
        f"sent {fmt(counts.get('sent'))}, fired {fmt(counts.get('fired_distinct'))}, "
        f"lost {fmt(counts.get('lost'))}, late after the window "
        f"{fmt(lookup(rec, 'summary', 'delivery', 'late_after_window'))}",
        f"lateness p99 {fmt(late.get('p99'))} p99.9 {fmt(late.get('p99_9'))} ms",
    ]
    if rec.get("steady"):
        parts.append(f"steady fired {fmt(rec['steady']['fired_per_s'])}/s")
    if rec.get("drain"):
        parts.append(f"drain {fmt(rec['drain']['rate_per_s'])}/s")
    parts.append(f"claim mean {fmt(lookup(rec, 'claim', 'mean_ms'), 2)} ms")
    parts.append(f"RSS max {fmt(rec.get('rss_max_mb'), 0)} MB")
    return "; ".join(parts)


def print_table(bench: dict[str, Any]) -> None:
    print("", file=sys.stderr)
    for row in bench.get("targets", []):
        mark = {True: "pass", False: "FAIL", None: "  - "}[row["pass"]]
        print(
            f"  {mark}  {row['scenario']:<12} {row['target']}: {row['measured']}", file=sys.stderr
        )
