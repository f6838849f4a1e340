"""``BENCHMARK.md`` and the summaries printed on stderr."""

from __future__ import annotations

import os
import sys

from loadtest.bench.evaluation import capacity, fmt, run_ceiling
from loadtest.bench.records import BenchRecord, Lateness, ScenarioRecord
from loadtest.bench.results.cpu import CpuUsage, PerCore
from loadtest.bench.results.load import Intake
from loadtest.bench.sampling import STALL_SECONDS
from loadtest.bench.scaling import budget_note, scaling_points


def _pass_text(ok: bool | None) -> str:
    return {True: "**pass**", False: "**FAIL**", None: "—"}[ok]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _cpu_per_message_lines(bench: BenchRecord) -> list[str]:
    """CPU microseconds per message handled, each component apart; the broker's cost beyond
    that of the ``relay`` control (the same broker and load generator without Chronos)."""
    recs = [r for r in bench.scenarios if r.cpu_per_message is not None]
    if not recs:
        return []
    control = next((r.cpu for r in recs if r.kind == "relay"), None)
    base_rate = broker_cores(control)
    lines = [
        "",
        "CPU microseconds per message handled (every message sent to Chronos during the load, "
        "a background load's included). *node*: the node's whole process tree (children and "
        "the children it waited for included). The broker's cost is largely per second (its "
        "clients' requests), not per message: *broker cores* is its CPU seconds per wall "
        "second, and *broker beyond control* its CPU per message after taking away, for the "
        "same wall time, what it used per second in the `relay` control (the echo relay in "
        "place of Chronos, at the precision load). Postgres's is given whole and *beyond idle*: "
        "less, for the same wall time, what it used per second in the seconds before the load "
        "with the same nodes up and no message (*postgres idle cores*: every node's polls, "
        "heartbeats and leaders' statements, in every shard):",
        "",
        "| scenario | messages | node | broker | broker cores | broker beyond control | "
        "postgres | postgres idle cores | postgres beyond idle | load generator |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in recs:
        per = rec.cpu_per_message
        assert per is not None
        beyond = None
        cpu = rec.cpu
        if (
            rec.kind != "relay"
            and base_rate is not None
            and cpu is not None
            and cpu.broker_s is not None
            and cpu.wall_s
            and per.messages
        ):
            beyond = round((cpu.broker_s - base_rate * cpu.wall_s) * 1e6 / per.messages, 1)
        cells = [
            fmt(per.messages),
            fmt(per.node_us),
            fmt(per.broker_us),
            fmt(broker_cores(cpu), 2),
            fmt(beyond),
            fmt(per.postgres_us),
            fmt(None if cpu is None else cpu.postgres_idle_cores, 3),
            fmt(per.postgres_beyond_idle_us),
            fmt(per.harness_us),
        ]
        lines.append(f"| {rec.name} | " + " | ".join(cells) + " |")
    return lines


def headline_rate(rec: ScenarioRecord) -> tuple[float | None, str]:
    """A scenario's own raw rate and what it is: the ceiling's, the steady fired rate of a
    steady load, the drain rate of a burst."""
    if rec.kind == "ceiling":
        return rec.ceiling_msg_per_s, "ceiling"
    if rec.drain is not None and rec.drain.rate_per_s is not None:
        return rec.drain.rate_per_s, "drain"
    if rec.steady is not None and rec.steady.fired_per_s is not None:
        return rec.steady.fired_per_s, "steady fired"
    return None, ""


def per_core_lines(bench: BenchRecord) -> list[str]:
    """Messages per CPU second of each component beside the raw rates (``per_core``)."""
    recs = [r for r in bench.scenarios if r.per_core is not None]
    if not recs:
        return []
    lines = [
        "",
        "Messages per core-second: the messages handled during the load over each "
        "component's CPU seconds, i.e. the msg/s one core of it carries at this load's mix "
        "(what holds across machines; the raw rates do not). *Postgres* and the *broker* "
        "serve every node of the run; *node* is all nodes' process trees together (in the "
        "ceiling: the process driving the store's statements). *cores* is CPU seconds per "
        "wall second:",
        "",
        "| scenario | nodes | raw rate msg/s | handled msg/s | msg per Postgres core-s | "
        "msg per node core-s | msg per broker core-s | Postgres / node / broker cores |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in recs:
        pc = rec.per_core
        assert pc is not None
        rate, what = headline_rate(rec)
        cells = [
            rec.name,
            fmt(rec.nodes),
            f"{fmt(rate, 0)} ({what})" if rate is not None else fmt(None),
            fmt(pc.handled_per_s),
            fmt(pc.postgres),
            fmt(pc.node),
            fmt(pc.broker),
            " / ".join(fmt(v, 2) for v in (pc.postgres_cores, pc.node_cores, pc.broker_cores)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def broker_cores(cpu: CpuUsage | None) -> float | None:
    """The broker's CPU seconds per wall second during a load."""
    if cpu is None or cpu.broker_s is None or not cpu.wall_s:
        return None
    return round(cpu.broker_s / cpu.wall_s, 2)


def render_markdown(bench: BenchRecord) -> str:
    """BENCHMARK.md: headline, targets, scenario details, machine facts and links."""
    lines: list[str] = ["# Chronos benchmark", ""]
    if bench.quick:
        lines += [
            "> **Quick mode**: a smoke test with shrunken scenarios, not the headline benchmark.",
            "",
        ]
    ceiling = run_ceiling(bench)
    cap, source = capacity(bench)
    if cap and ceiling:
        kind = "capacity" if source == "saturate" else "sustained rate (offered-limited)"
        lines.append(
            f"**One Chronos node: {cap:,.0f} msg/s {kind} = {cap / ceiling:.2f} x the ceiling "
            f"({ceiling:,.0f} msg/s: the node's own enqueue, claim and delete statements through "
            "its store, without Kafka, on the same Postgres in the same run; the larger of the "
            "first and the last measurement).**"
        )
        sustained = next(iter(bench.by_kind("sustained")), None)
        steady = sustained.steady if sustained is not None and sustained.ok else None
        fired = None if steady is None else steady.fired_per_s
        if fired and source != "sustained":
            lines.append(
                f"At the 10,000 msg/s target load it fired {fired:,.0f} msg/s "
                f"({fired / ceiling:.2f} x the ceiling)."
            )
        lines.append("")
    lines += [
        f"Command: `{bench.command}`  ",
        f"Started {bench.started}, finished {bench.ended} ({fmt(bench.elapsed_s, 0)} s).",
        "",
        "## Targets",
        "",
        "| scenario | target | measured | result |",
        "|---|---|---|---|",
    ]
    for row in bench.targets:
        measured = row.measured + (f" ({row.note})" if row.note else "")
        lines.append(
            f"| {row.scenario} | {_md_escape(row.target)} | "
            f"{_md_escape(measured)} | {_pass_text(row.ok)} |"
        )
    lines += ["", "## Scenarios", ""]
    lines += [
        "| scenario | nodes | load | sent | fired | lost | late after window | dup ids | "
        "lateness p50 / p99 / p99.9 / max ms | early | steady fired/s | claim mean / p99 ms | "
        "node memory max MB (PSS) | node CPU s | backlog |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in bench.scenarios:
        if rec.kind == "ceiling":
            continue
        if not rec.ok:
            lines.append(
                f"| {rec.name} | {rec.nodes} | {rec.load} | "
                f"{_md_escape(rec.error or rec.status or '')} |" + " |" * 11
            )
            continue
        lines.append("| " + " | ".join(_scenario_cells(rec)) + " |")
    lines += [
        "",
        "CPU seconds per component during each load (the machine is shared: *other* is "
        "every process that is not part of the benchmark; *of which the sampler*: the part of "
        "Postgres's that answered the benchmark's own sampler, which counts the waiting rows "
        "every second, left out of the figures per message and per core-second):",
        "",
        "| scenario | wall s | nodes | postgres | of which the sampler | broker | load generator "
        "| other | machine busy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in bench.scenarios:
        cpu = rec.cpu
        if cpu is None:
            continue
        lines.append(
            "| "
            + " | ".join(
                [rec.name]
                + [
                    fmt(cpu.get(k))
                    for k in (
                        "wall_s",
                        "nodes_s",
                        "postgres_s",
                        "sampler_postgres_s",
                        "broker_s",
                        "harness_s",
                        "other_s",
                        "machine_busy_s",
                    )
                ]
            )
            + " |"
        )
    lines += _cpu_per_message_lines(bench)
    lines += per_core_lines(bench)
    lines += _scaling_lines(bench)
    lines += postgres_lines(bench)
    stalled = [r for r in bench.scenarios if r.stalls]
    if stalled:
        lines += ["", "### Stalls", ""]
        for rec in stalled:
            for stall in rec.stalls:
                lines.append(
                    f"- **{rec.name}**: node {stall.node} fired nothing for "
                    f"{STALL_SECONDS:.0f} s while {fmt(stall.overdue)} rows were overdue; "
                    f"thread stacks and database sessions in [{stall.file}]"
                    f"({rec.name}/{stall.file})."
                )
    extra = [r for r in bench.scenarios if r.kind in ("burst", "backlog")]
    if extra:
        lines += ["", "### Burst and backlog", ""]
        lines += [line for rec in extra if (line := _burst_or_backlog(rec))]
    machine = bench.machine
    lines += ["", "## Machine", ""]
    for key, label in (
        ("cpu_model", "CPU"),
        ("cores", "cores"),
        ("memory_gb", "memory GB"),
        ("loadavg_start", "load average at start (1, 5, 15 min)"),
        ("loadavg_end", "load average at end"),
        ("kernel", "kernel"),
        ("python", "Python"),
        ("broker", "broker"),
        ("postgres", "Postgres"),
        ("chronos", "Chronos"),
        ("commit", "commit"),
    ):
        value = machine.get(key)
        if isinstance(value, list):
            value = ", ".join(f"{v:.2f}" for v in value)
        lines.append(f"- {label}: {value if value is not None else 'n/a'}")
    stack = bench.stack
    if stack:
        lines.append(
            f"- stack: Postgres durable={stack.get('postgres_durable')}, "
            f"{stack.get('partitions')} partitions per topic, node settings "
            f"{stack.get('node_settings_summary', '')}"
        )
        server = stack.get("postgres_settings")
        lines.append(
            "- Postgres settings: "
            + (
                ", ".join(f"{k}={v}" for k, v in server.items())
                if server
                else "the server's defaults"
            )
        )
    lines += ["", "## Reports", ""]
    for rec in bench.scenarios:
        links = [f"[{label}]({path})" for label, path in rec.files.items()]
        if links:
            lines.append(f"- {rec.name}: " + ", ".join(links))
    profiled = [r for r in bench.scenarios if r.profile is not None]
    if profiled:
        lines += ["", "## Profiles", ""]
        for rec in profiled:
            lines += _profile_lines(rec)
    return "\n".join(lines) + "\n"


def _scenario_cells(rec: ScenarioRecord) -> list[str]:
    counts = rec.counts
    late = rec.lateness or Lateness()
    claim = rec.claim
    return [
        rec.name,
        str(rec.nodes),
        rec.load,
        fmt(counts.sent),
        fmt(counts.fired_distinct),
        fmt(counts.lost),
        fmt(None if rec.delivery is None else rec.delivery.late_after_window),
        fmt(counts.duplicate_ids),
        " / ".join(fmt(v) for v in (late.p50, late.p99, late.p99_9, late.max)),
        fmt(rec.early_count),
        fmt(None if rec.steady is None else rec.steady.fired_per_s),
        f"{fmt(claim.mean_ms, 2)} / {fmt(claim.p99_ms, 2)}",
        fmt(rec.rss_max_mb, 0),
        fmt(None if rec.cpu is None else rec.cpu.nodes_s),
        {True: "grew", False: "flat", None: "—"}[rec.growing],
    ]


def _scaling_lines(bench: BenchRecord) -> list[str]:
    """BENCHMARK.md's scaling section (nothing when the curve did not run)."""
    points = scaling_points(bench)
    if not points:
        return []
    cores = bench.machine.get("cores")
    note = budget_note(points, cores if isinstance(cores, int) else os.cpu_count())
    lines = [
        "",
        "### Scaling: nodes against one Postgres",
        "",
        "Each run offered 0.8 x the ceiling (more than one node takes): its steady fired rate "
        "is the capacity of that many nodes. Cores: CPU seconds per wall second of the load.",
        "",
        "| nodes | offered msg/s | steady fired msg/s | x first | node cores | Postgres cores | "
        "broker cores | load generator cores | other cores | machine busy | "
        "msg per Postgres core-s | msg per node core-s | msg per broker core-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        pc = p.per_core or PerCore()
        busy = None if p.machine_util is None else f"{p.machine_util:.0%}"
        cells = [
            str(p.nodes),
            fmt(p.offered_per_s, 0),
            fmt(p.fired_per_s, 0),
            fmt(p.speedup, 2),
            fmt(p.node_cores, 2),
            fmt(p.postgres_cores, 2),
            fmt(p.broker_cores, 2),
            fmt(p.load_generator_cores, 2),
            fmt(p.other_cores, 2),
            fmt(busy),
            fmt(pc.postgres),
            fmt(pc.node),
            fmt(pc.broker),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if note:
        lines += ["", note]
    return lines


def postgres_lines(bench: BenchRecord) -> list[str]:
    """Each load's Postgres by statement (execution time, ``pg_stat_statements``) and by
    process kind (CPU seconds)."""
    recs = [r for r in bench.scenarios if r.postgres_breakdown is not None]
    if not recs:
        return []
    lines = [
        "",
        "### Postgres by statement and by process",
        "",
        "Execution seconds of the busiest statements during each load (µs per message handled, "
        "calls) from `pg_stat_statements`, and Postgres's CPU seconds by process kind "
        "(*reaped*: autovacuum workers, parallel workers and backends that ended meanwhile); "
        "then the table's autovacuums and autoanalyzes, the parallel workers launched and the "
        "WAL written per message:",
        "",
    ]
    for rec in recs:
        pg = rec.postgres_breakdown
        assert pg is not None
        statements = "; ".join(
            f"`{_md_escape(s.statement)}` {fmt(s.exec_s, 2)} s "
            f"({fmt(s.exec_us_per_message)} µs/msg, {fmt(s.calls)} calls)"
            for s in pg.statements
        )
        kinds = ", ".join(f"{k} {fmt(v, 2)}" for k, v in pg.cpu_by_kind_s.items())
        line = f"- **{rec.name}**: {statements or 'none'}. CPU s: {kinds or 'n/a'}."
        if pg.activity:
            messages = rec.cpu_per_message.messages if rec.cpu_per_message else None
            line += " " + activity_text(pg.activity, messages)
        lines.append(line)
    return lines


def activity_text(counters: dict[str, float], messages: int | None) -> str:
    """The table's maintenance and the WAL of one load, in words."""
    parts = []
    for name, label in (("autovacuums", "autovacuums"), ("autoanalyzes", "autoanalyzes")):
        if name in counters:
            seconds = counters.get(name[:-1] + "_s")
            took = f" ({fmt(seconds, 2)} s)" if seconds is not None else ""
            parts.append(f"{fmt(int(counters[name]))} {label}{took}")
    if "parallel_workers" in counters:
        parts.append(f"{fmt(int(counters['parallel_workers']))} parallel workers")
    if messages and "wal_records" in counters:
        per = {k: counters.get(k, 0.0) / messages for k in ("wal_records", "wal_fpi", "wal_bytes")}
        parts.append(
            f"WAL per message: {per['wal_records']:.2f} records, {per['wal_bytes']:.0f} bytes, "
            f"{per['wal_fpi']:.3f} full-page images"
        )
    return ("Table and WAL: " + "; ".join(parts) + ".") if parts else ""


def _burst_or_backlog(rec: ScenarioRecord) -> str | None:
    if rec.kind == "burst" and rec.drain is not None:
        d, intake = rec.drain, rec.intake or Intake()
        return (
            f"- **{rec.name}**: {fmt(d.count)} messages fired in "
            f"{fmt(d.seconds, 2)} s from the first fire to the last = "
            f"{fmt(d.rate_per_s)} msg/s; all stored "
            f"{fmt(intake.stored_after_s)} s after the first send "
            f"({fmt(intake.rate_per_s)} msg/s intake); "
            f"{fmt(rec.published_directly)} published directly."
        )
    if rec.kind == "backlog":
        pre = rec.preload
        return (
            f"- **{rec.name}**: {fmt(pre.rows)} rows pre-loaded in "
            f"{fmt(pre.seconds)} s ({fmt(pre.table_mb, 0)} MB table + "
            f"indexes); claims {fmt(rec.claim.count)}, "
            f"{fmt(rec.claim.rows)} rows each."
        )
    return None


def _profile_lines(rec: ScenarioRecord) -> list[str]:
    prof = rec.profile
    if prof is None:
        return []
    lines = [
        f"### {rec.name} (node 0, {prof.samples} samples holding the GIL)",
        "",
        "| self % | total % | function |",
        "|---|---|---|",
    ]
    totals = {i.function: i.percent for i in prof.total}
    for item in prof.self[:15]:
        lines.append(
            f"| {item.percent} | {totals.get(item.function, '')} | `{_md_escape(item.function)}` |"
        )
    lines.append("")
    return lines


def one_line(rec: ScenarioRecord) -> str:
    """A scenario's figures in one line, for the progress on stderr."""
    if rec.kind == "ceiling":
        return f"{rec.ceiling_msg_per_s or 0:,.0f} msg/s"
    if rec.catchup is not None:
        c = rec.catchup
        return (
            f"backlog {fmt(c.backlog_fired)} of {fmt(c.backlog_sent)} at "
            f"{fmt(c.backlog_rate_per_s)} msg/s (catch-up rate {fmt(c.catchup_rate, 0)}); stream "
            f"p99 {fmt(c.stream_p99_ms)} ms; lost {fmt(c.backlog_lost + c.stream_lost)}"
        )
    late = rec.lateness or Lateness()
    counts = rec.counts
    late_after = None if rec.delivery is None else rec.delivery.late_after_window
    parts = [
        f"sent {fmt(counts.sent)}, fired {fmt(counts.fired_distinct)}, "
        f"lost {fmt(counts.lost)}, late after the window {fmt(late_after)}",
        f"lateness p99 {fmt(late.p99)} p99.9 {fmt(late.p99_9)} ms",
    ]
    if rec.steady is not None:
        parts.append(f"steady fired {fmt(rec.steady.fired_per_s)}/s")
    if rec.drain is not None:
        parts.append(f"drain {fmt(rec.drain.rate_per_s)}/s")
    parts.append(f"claim mean {fmt(rec.claim.mean_ms, 2)} ms")
    parts.append(f"memory max {fmt(rec.rss_max_mb, 0)} MB")
    return "; ".join(parts)


def print_table(bench: BenchRecord) -> None:
    print("", file=sys.stderr)
    for row in bench.targets:
        mark = {True: "pass", False: "FAIL", None: "  - "}[row.ok]
        print(f"  {mark}  {row.scenario:<12} {row.target}: {row.measured}", file=sys.stderr)
