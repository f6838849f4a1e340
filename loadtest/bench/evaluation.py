"""The verdicts: each scenario's figures judged against its targets (``loadtest.bench.scenarios``),
as the rows of the headline table."""

from __future__ import annotations

from loadtest.analysis.delivery import Row, late_text, scenario_delivery_rows
from loadtest.bench import scenarios as sc
from loadtest.bench.catchup_verdicts import catchup_rows
from loadtest.bench.records import BenchRecord, Lateness, ScenarioRecord
from loadtest.bench.results.load import Drain
from loadtest.bench.scaling import scaling_rows
from loadtest.bench.tenant_verdicts import tenant_rows


def fmt(value: float | str | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _first(bench: BenchRecord, kind: str) -> ScenarioRecord | None:
    return next(iter(bench.by_kind(kind)), None)


def ceiling_rate(bench: BenchRecord, name: str = "ceiling") -> float | None:
    """The ceiling measured first (the headline's reference), or the one named ``name``
    (``ceiling-end``: measured again after the scenarios, to show how the machine drifted)."""
    rec = next((r for r in bench.by_kind("ceiling") if r.name == name), None)
    value = rec.ceiling_msg_per_s if rec is not None and rec.ok else None
    return float(value) if value else None


def run_ceiling(bench: BenchRecord) -> float | None:
    """The ceiling the saturation is judged against: the larger of the two measured in the same
    run (first and last), so a machine that got busier meanwhile never flatters the ratio."""
    values = [v for name in ("ceiling", "ceiling-end") if (v := ceiling_rate(bench, name))]
    return max(values) if values else None


def capacity(bench: BenchRecord) -> tuple[float | None, str | None]:
    """Chronos's sustained throughput on one node and where it comes from: the steady fired
    rate of ``saturate`` (offered more than it can take) when it ran, else that of
    ``sustained`` (a lower bound: limited by the offered rate)."""
    for kind in ("saturate", "sustained"):
        rec = _first(bench, kind)
        steady = rec.steady if rec is not None and rec.ok else None
        fired = None if steady is None else steady.fired_per_s
        if fired:
            return float(fired), kind
    return None, None


def _keeps_up(rec: ScenarioRecord, rate: float) -> tuple[bool, str]:
    fired = None if rec.steady is None else rec.steady.fired_per_s
    lost = rec.counts.lost
    growing = rec.growing
    ok = (
        fired is not None
        and fired >= (1 - sc.RATE_TOLERANCE) * rate
        and lost == 0
        and growing is False
    )
    backlog = {True: "grew", False: "flat", None: "n/a"}[growing]
    text = f"{fmt(fired)} msg/s fired (steady), {fmt(lost)} lost, backlog {backlog}"
    return ok, _with_late(text, rec)


def _with_late(text: str, rec: ScenarioRecord) -> str:
    late = late_text(rec.delivery)
    return f"{text}, {late}" if late else text


def evaluate(bench: BenchRecord) -> list[Row]:
    """The headline rows: scenario, target, measured, pass (True/False; None: not measured)."""
    floor = relay_floor(bench)
    return [
        *_ceiling_rows(bench),
        *_sustained_rows(bench),
        _ratio_row(bench),
        *_precision_rows(bench, floor),
        *_burst_rows(bench),
        *_cpu_rows(bench),
        *scaling_rows(bench),
        *_backlog_rows(bench),
        *tenant_rows(bench),
        *catchup_rows(bench),
        *_rss_rows(bench),
        *scenario_delivery_rows(
            [
                r.delivery_figures
                for r in bench.scenarios
                if r.ok and r.kind not in ("ceiling", "saturate", "scaling", "relay", "catchup")
            ]
        ),
    ]


def _ceiling_rows(bench: BenchRecord) -> list[Row]:
    ceiling = ceiling_rate(bench)
    rows = [
        Row(
            "ceiling",
            "the node's enqueue/claim/delete through its store, same Postgres, no Kafka",
            f"{fmt(ceiling)} msg/s",
            None,
            "reference",
        )
    ]
    again = ceiling_rate(bench, "ceiling-end")
    if again is not None:
        rows.append(
            Row(
                "ceiling-end",
                "the same, measured again after the scenarios",
                f"{fmt(again)} msg/s",
                None,
                "machine drift during the run",
            )
        )
    return rows


def _sustained_rows(bench: BenchRecord) -> list[Row]:
    rows: list[Row] = []
    for kind, label in (("sustained", "1 node"), ("sustained2", "2 nodes")):
        for rec in bench.by_kind(kind):
            target = (
                f"{label}: >= {sc.SUSTAINED_RATE:,} msg/s for {fmt(rec.duration_s, 0)}"
                f" s, {rec.delay}, backlog not growing"
            )
            if not rec.ok:
                rows.append(Row(rec.name, target, rec.error or "did not run", False))
                continue
            ok, text = _keeps_up(rec, sc.SUSTAINED_RATE)
            rows.append(Row(rec.name, target, text, ok))
    return rows


def _ratio_row(bench: BenchRecord) -> Row:
    """Saturation: the node's drain rate as a ratio of the ceiling of the same run."""
    ceiling = run_ceiling(bench)
    cap, source = capacity(bench)
    target = (
        f"saturation: node drain rate >= {sc.CEILING_RATIO} x the ceiling of the same run "
        "(the larger of first and last)"
    )
    if cap is None or not ceiling:
        return Row("ratio", target, "n/a", None)
    ratio = cap / ceiling
    ok: bool | None
    if source == "saturate":
        ok = ratio >= sc.CEILING_RATIO
        saturate = _first(bench, "saturate")
        offered = None if saturate is None else saturate.offered_rate
        note = f"one node offered {fmt(offered, 0)} msg/s ({sc.SATURATE_FACTOR} x ceiling)"
    else:
        ok = True if ratio >= sc.CEILING_RATIO else None
        note = "lower bound (limited by the offered rate); run 'saturate' to measure"
    return Row(
        source or "ratio", target, f"{fmt(cap)} / {fmt(ceiling)} msg/s = {ratio:.2f}", ok, note
    )


def _precision_rows(bench: BenchRecord, floor: Lateness | None) -> list[Row]:
    rows: list[Row] = []
    if floor is not None:
        rows.append(
            Row(
                "relay",
                "the stack without Chronos (echo relay) at the precision load",
                f"lateness p99 {fmt(floor.p99)} ms, p99.9 {fmt(floor.p99_9)} ms",
                None,
                "the floor the load generator and the broker impose",
            )
        )
    for rec in [*bench.by_kind("precision"), *bench.by_kind("intake")]:
        name = rec.name
        what = "under intake: " if rec.kind == "intake" else ""
        if not rec.ok:
            rows.append(Row(name, f"precision {what}", rec.error or "did not run", False))
            continue
        late = rec.lateness or Lateness()
        early = rec.early_count
        lost = rec.counts.lost
        p99, p999, worst = late.p99, late.p99_9, late.max
        if rec.kind == "precision":
            rows.append(
                Row(
                    name,
                    f"p99 lateness <= {fmt(sc.PRECISION_P99_MS, 0)} ms",
                    f"{fmt(p99)} ms",
                    p99 is not None and p99 <= sc.PRECISION_P99_MS,
                    _precision_note(rec, floor, "p99", sc.PRECISION_P99_MS),
                )
            )
        rows.append(
            Row(
                name,
                f"{what}p99.9 lateness <= {fmt(sc.PRECISION_P999_MS, 0)} ms",
                f"{fmt(p999)} ms",
                p999 is not None and p999 <= sc.PRECISION_P999_MS,
                _precision_note(rec, floor, "p99_9", sc.PRECISION_P999_MS),
            )
        )
        rows.append(
            Row(
                name,
                f"{what}max lateness <= {fmt(sc.PRECISION_MAX_MS, 0)} ms",
                f"{fmt(worst)} ms",
                worst is not None and worst <= sc.PRECISION_MAX_MS,
                _precision_note(rec, floor, "max", sc.PRECISION_MAX_MS),
            )
        )
        text = _with_late(f"{fmt(early)} early, {fmt(lost)} lost", rec)
        missing = rec.background_missing
        if rec.background_sent is not None:
            # The intake load is stored, not fired: a record intake lost is missing from the table.
            text += (
                f"; intake load {fmt(rec.background_stored)} of {fmt(rec.background_sent)} stored"
            )
        rows.append(
            Row(
                name,
                "zero early, zero lost",
                text,
                early == 0 and lost == 0 and missing in (None, 0),
            )
        )
    return rows


def _burst_rows(bench: BenchRecord) -> list[Row]:
    rows: list[Row] = []
    for rec in bench.by_kind("burst"):
        target = f"{fmt(rec.count)} due at one instant drain at >= {sc.BURST_DRAIN_RATE:,}/s"
        if not rec.ok:
            rows.append(Row(rec.name, target, rec.error or "did not run", False))
            continue
        drain = rec.drain or Drain()
        rate, lost = drain.rate_per_s, rec.counts.lost
        direct = rec.published_directly
        note = f"{fmt(direct)} published directly (arrived after the deadline)" if direct else ""
        rows.append(
            Row(
                rec.name,
                target,
                _with_late(
                    f"{fmt(rate)} msg/s over {fmt(drain.seconds, 2)} s, {fmt(lost)} lost",
                    rec,
                ),
                rate is not None and rate >= sc.BURST_DRAIN_RATE and lost == 0,
                note,
            )
        )
    return rows


def _cpu_rows(bench: BenchRecord) -> list[Row]:
    """CPU per message of the node's process tree and of the broker (reported, not judged: the
    figure is compared across runs, not against a fixed bound)."""
    rows: list[Row] = []
    control = _first(bench, "relay")
    base = None if control is None else control.cpu_per_message
    for rec in bench.scenarios:
        per = rec.cpu_per_message
        if rec.kind not in ("sustained", "burst", "intake") or not rec.ok or per is None:
            continue
        note = ""
        if base is not None and base.broker_us is not None:
            note = f"broker with the echo relay instead of Chronos: {fmt(base.broker_us)} µs/msg"
        rows.append(
            Row(
                rec.name,
                "CPU per message handled: node (process tree) / broker",
                f"{fmt(per.node_us)} / {fmt(per.broker_us)} µs/msg "
                f"over {fmt(per.messages)} messages",
                None,
                note,
            )
        )
    return rows


def _rss_rows(bench: BenchRecord) -> list[Row]:
    rss = [
        (r.rss_max_mb, r.name)
        for r in bench.scenarios
        if r.rss_max_mb is not None and r.kind != "relay"
    ]
    if rss:
        worst, worst_name = max(rss, key=lambda pair: pair[0])
        return [
            Row(
                "all",
                f"node memory (PSS) < {sc.RSS_LIMIT_MB:.0f} MB in every scenario",
                f"max {worst:.0f} MB ({worst_name})",
                worst < sc.RSS_LIMIT_MB,
            )
        ]
    return []


def relay_floor(bench: BenchRecord) -> Lateness | None:
    """Lateness of the ``relay`` control run (the stack without Chronos), if it ran."""
    rec = _first(bench, "relay")
    return rec.lateness if rec is not None and rec.ok else None


def _precision_note(rec: ScenarioRecord, floor: Lateness | None, key: str, limit: float) -> str:
    """Why a precision figure may not be Chronos's: messages that reached it after their
    deadline, and a stack that misses the target without Chronos."""
    notes = []
    direct = rec.published_directly
    if direct:
        notes.append(f"{fmt(direct)} messages reached Chronos after their deadline")
        own = rec.node_lateness.p99_ms if key == "p99" else rec.node_lateness.p99_9_ms
        if own is not None:
            notes.append(
                f"the node's own histogram of the messages it held (at the broker's "
                f"acknowledgement): {own:,.0f} ms"
            )
    base = None if floor is None else floor.get(key)
    if base is not None and base > limit:
        notes.append(f"the stack without Chronos: {fmt(base)} ms")
    return "; ".join(notes)


def _within(value: float | None, base: float | None, factor: float, slack: float) -> bool:
    if value is None or base is None:
        return False
    return value <= max(base * factor, base + slack)


def _backlog_rows(bench: BenchRecord) -> list[Row]:
    recs = bench.by_kind("backlog")
    if not recs:
        return []
    recs = sorted(recs, key=lambda r: r.preload_rows)
    base, big = recs[0], recs[-1]
    name = big.name
    rows_label = f"{big.preload_rows:,} rows"
    if len(recs) < 2 or not (base.ok and big.ok):
        bad = next((r for r in recs if not r.ok), None)
        why = (None if bad is None else bad.error) or "needs both the baseline and the big pre-load"
        return [Row(name, f"{rows_label}: matches the baseline", why, False)]
    out: list[Row] = []
    cb, cg = base.claim, big.claim
    ok = _within(
        cg.mean_ms,
        cb.mean_ms,
        sc.BACKLOG_CLAIM_MEAN_FACTOR,
        sc.BACKLOG_CLAIM_MEAN_SLACK_MS,
    ) and _within(
        cg.p99_ms,
        cb.p99_ms,
        sc.BACKLOG_CLAIM_P99_FACTOR,
        sc.BACKLOG_CLAIM_P99_SLACK_MS,
    )
    out.append(
        Row(
            name,
            f"claim latency with {rows_label} matches {base.name}",
            f"mean {fmt(cg.mean_ms, 2)} vs {fmt(cb.mean_ms, 2)} ms, "
            f"p99 {fmt(cg.p99_ms, 2)} vs {fmt(cb.p99_ms, 2)} ms",
            ok,
        )
    )
    lb = base.lateness or Lateness()
    lg = big.lateness or Lateness()
    early = big.early_count
    p99, p999 = lg.p99, lg.p99_9
    ok = (
        _within(p99, lb.p99, 1.0, sc.BACKLOG_P99_SLACK_MS)
        and _within(p999, lb.p99_9, 1.0, sc.BACKLOG_P999_SLACK_MS)
        and p99 is not None
        and p99 <= sc.PRECISION_P99_MS
        and p999 is not None
        and p999 <= sc.PRECISION_P999_MS
        and early == 0
    )
    out.append(
        Row(
            name,
            f"precision with {rows_label} matches {base.name} (p99 within "
            f"+{sc.BACKLOG_P99_SLACK_MS:g} ms, p99.9 within +{sc.BACKLOG_P999_SLACK_MS:g} ms, "
            "and on target)",
            f"p99 {fmt(lg.p99)} vs {fmt(lb.p99)} ms, p99.9 "
            f"{fmt(lg.p99_9)} vs {fmt(lb.p99_9)} ms, {fmt(early)} early",
            ok,
        )
    )
    rss = big.rss_max_mb
    out.append(
        Row(
            name,
            f"node memory (PSS) < {sc.RSS_LIMIT_MB:.0f} MB with {rows_label}",
            f"{fmt(rss, 0)} MB (baseline {fmt(base.rss_max_mb, 0)} MB)",
            rss is not None and rss < sc.RSS_LIMIT_MB,
        )
    )
    return out
