"""The verdicts: each scenario's figures judged against its targets (``loadtest.scenarios``),
as the rows of the headline table."""

from __future__ import annotations

from typing import Any

from loadtest import scenarios as sc
from loadtest.delivery import Delivery, delivery_rows, late_text


def by_kind(bench: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in bench.get("scenarios", []) if r.get("kind") == kind]


def ran_ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec.get("status") == "ok"


def lookup(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def ceiling_rate(bench: dict[str, Any], name: str = "ceiling") -> float | None:
    """The ceiling measured first (the headline's reference), or the one named ``name``
    (``ceiling-end``: measured again after the scenarios, to show how the machine drifted)."""
    rec = next((r for r in by_kind(bench, "ceiling") if r.get("name") == name), None)
    value = lookup(rec, "result", "ceiling_msg_per_s") if ran_ok(rec) else None
    return float(value) if value else None


def capacity(bench: dict[str, Any]) -> tuple[float | None, str | None]:
    """Chronos's sustained throughput on one node and where it comes from: the steady fired
    rate of ``saturate`` (offered more than it can take) when it ran, else that of
    ``sustained`` (a lower bound: limited by the offered rate)."""
    for kind in ("saturate", "sustained"):
        rec = next(iter(by_kind(bench, kind)), None)
        fired = lookup(rec, "steady", "fired_per_s") if ran_ok(rec) else None
        if fired:
            return float(fired), kind
    return None, None


def _row(scenario: str, target: str, measured: str, ok: bool | None, note: str = "") -> dict:
    return {"scenario": scenario, "target": target, "measured": measured, "pass": ok, "note": note}


def _keeps_up(rec: dict[str, Any], rate: float) -> tuple[bool, str]:
    fired = lookup(rec, "steady", "fired_per_s")
    lost = lookup(rec, "summary", "counts", "lost")
    growing = lookup(rec, "backlog", "growing")
    ok = (
        fired is not None
        and fired >= (1 - sc.RATE_TOLERANCE) * rate
        and lost == 0
        and growing is False
    )
    backlog = {True: "grew", False: "flat", None: "n/a"}[growing]
    text = f"{fmt(fired)} msg/s fired (steady), {fmt(lost)} lost, backlog {backlog}"
    return ok, _with_late(text, rec)


def _with_late(text: str, rec: dict[str, Any]) -> str:
    late = late_text(Delivery.from_dict(lookup(rec, "summary", "delivery")))
    return f"{text}, {late}" if late else text


def evaluate(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline rows: scenario, target, measured, pass (True/False; None: not measured)."""
    rows: list[dict[str, Any]] = []
    ceiling = ceiling_rate(bench)
    rows.append(
        _row(
            "ceiling",
            "raw SQL insert/claim/delete on the same Postgres",
            f"{fmt(ceiling)} msg/s",
            None,
            "reference",
        )
    )
    again = ceiling_rate(bench, "ceiling-end")
    if again is not None:
        rows.append(
            _row(
                "ceiling-end",
                "the same, measured again after the scenarios",
                f"{fmt(again)} msg/s",
                None,
                "machine drift during the run",
            )
        )

    for kind, label in (("sustained", "1 node"), ("sustained2", "2 nodes")):
        for rec in by_kind(bench, kind):
            w = rec.get("workload") or {}
            target = (
                f"{label}: >= {sc.SUSTAINED_RATE:,} msg/s for {fmt(w.get('duration_s'), 0)}"
                f" s, {w.get('delay')}, backlog not growing"
            )
            if not ran_ok(rec):
                rows.append(_row(rec["name"], target, rec.get("error") or "did not run", False))
                continue
            ok, text = _keeps_up(rec, sc.SUSTAINED_RATE)
            rows.append(_row(rec["name"], target, text, ok))

    cap, source = capacity(bench)
    target = f"sustained throughput >= {sc.CEILING_RATIO} x ceiling"
    if cap is None or not ceiling:
        rows.append(_row("ratio", target, "n/a", None))
    else:
        ratio = cap / ceiling
        if source == "saturate":
            ok: bool | None = ratio >= sc.CEILING_RATIO
            offered = lookup(next(iter(by_kind(bench, "saturate")), None), "offered_rate")
            note = f"one node offered {fmt(offered, 0)} msg/s ({sc.SATURATE_FACTOR} x ceiling)"
        else:
            ok = True if ratio >= sc.CEILING_RATIO else None
            note = "lower bound (limited by the offered rate); run 'saturate' to measure"
        rows.append(
            _row(
                source or "ratio",
                target,
                f"{fmt(cap)} / {fmt(ceiling)} msg/s = {ratio:.2f}",
                ok,
                note,
            )
        )

    floor = relay_floor(bench)
    if floor is not None:
        rows.append(
            _row(
                "relay",
                "the stack without Chronos (echo relay) at the precision load",
                f"lateness p99 {fmt(floor.get('p99'))} ms, p99.9 {fmt(floor.get('p99_9'))} ms",
                None,
                "the floor the load generator and the broker impose",
            )
        )
    for rec in by_kind(bench, "precision"):
        name = rec["name"]
        if not ran_ok(rec):
            rows.append(_row(name, "precision", rec.get("error") or "did not run", False))
            continue
        late = lookup(rec, "summary", "lateness_ms") or {}
        early = lookup(rec, "summary", "early", "early_count")
        lost = lookup(rec, "summary", "counts", "lost")
        p99, p999 = late.get("p99"), late.get("p99_9")
        rows.append(
            _row(
                name,
                f"p99 lateness <= {fmt(sc.PRECISION_P99_MS, 0)} ms",
                f"{fmt(p99)} ms",
                p99 is not None and p99 <= sc.PRECISION_P99_MS,
                _precision_note(rec, floor, "p99", sc.PRECISION_P99_MS),
            )
        )
        rows.append(
            _row(
                name,
                f"p99.9 lateness <= {fmt(sc.PRECISION_P999_MS, 0)} ms",
                f"{fmt(p999)} ms",
                p999 is not None and p999 <= sc.PRECISION_P999_MS,
                _precision_note(rec, floor, "p99_9", sc.PRECISION_P999_MS),
            )
        )
        rows.append(
            _row(
                name,
                "zero early, zero lost",
                _with_late(f"{fmt(early)} early, {fmt(lost)} lost", rec),
                early == 0 and lost == 0,
            )
        )

    for rec in by_kind(bench, "burst"):
        w = rec.get("workload") or {}
        target = f"{fmt(w.get('count'))} due at one instant drain at >= {sc.BURST_DRAIN_RATE:,}/s"
        if not ran_ok(rec):
            rows.append(_row(rec["name"], target, rec.get("error") or "did not run", False))
            continue
        drain = rec.get("drain") or {}
        rate, lost = drain.get("rate_per_s"), lookup(rec, "summary", "counts", "lost")
        direct = lookup(rec, "node_counters", "published_directly")
        note = f"{fmt(direct)} published directly (arrived after the deadline)" if direct else ""
        rows.append(
            _row(
                rec["name"],
                target,
                _with_late(
                    f"{fmt(rate)} msg/s over {fmt(drain.get('seconds'), 2)} s, {fmt(lost)} lost",
                    rec,
                ),
                rate is not None and rate >= sc.BURST_DRAIN_RATE and lost == 0,
                note,
            )
        )

    rows.extend(_backlog_rows(bench))

    measured = [
        r
        for r in bench.get("scenarios", [])
        if r.get("rss_max_mb") is not None and r.get("kind") != "relay"
    ]
    if measured:
        worst = max(measured, key=lambda r: r["rss_max_mb"])
        rows.append(
            _row(
                "all",
                f"node RSS < {sc.RSS_LIMIT_MB:.0f} MB in every scenario",
                f"max {worst['rss_max_mb']:.0f} MB ({worst['name']})",
                worst["rss_max_mb"] < sc.RSS_LIMIT_MB,
            )
        )
    checked = [
        r
        for r in bench.get("scenarios", [])
        if ran_ok(r) and r.get("kind") not in ("ceiling", "saturate", "relay")
    ]
    rows.extend(row.as_dict() for row in delivery_rows(checked))
    return rows


def relay_floor(bench: dict[str, Any]) -> dict[str, Any] | None:
    """Lateness of the ``relay`` control run (the stack without Chronos), if it ran."""
    rec = next(iter(by_kind(bench, "relay")), None)
    return lookup(rec, "summary", "lateness_ms") if ran_ok(rec) else None


def _precision_note(
    rec: dict[str, Any], floor: dict[str, Any] | None, key: str, limit: float
) -> str:
    """Why a precision figure may not be Chronos's: messages that reached it after their
    deadline, and a stack that misses the target without Chronos."""
    notes = []
    direct = lookup(rec, "node_counters", "published_directly")
    if direct:
        notes.append(f"{fmt(direct)} messages reached Chronos after their deadline")
        own = lookup(rec, "node_lateness", f"{key}_ms")
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


def _backlog_rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    recs = by_kind(bench, "backlog")
    if not recs:
        return []
    recs = sorted(recs, key=lambda r: r.get("preload_rows", 0))
    base, big = recs[0], recs[-1]
    name = big["name"]
    rows_label = f"{big.get('preload_rows', 0):,} rows"
    if len(recs) < 2 or not (ran_ok(base) and ran_ok(big)):
        bad = next((r for r in recs if not ran_ok(r)), None)
        why = (bad or {}).get("error") or "needs both the baseline and the big pre-load"
        return [_row(name, f"{rows_label}: matches the baseline", why, False)]
    out: list[dict[str, Any]] = []
    cb, cg = base.get("claim") or {}, big.get("claim") or {}
    ok = _within(
        cg.get("mean_ms"),
        cb.get("mean_ms"),
        sc.BACKLOG_CLAIM_MEAN_FACTOR,
        sc.BACKLOG_CLAIM_MEAN_SLACK_MS,
    ) and _within(
        cg.get("p99_ms"),
        cb.get("p99_ms"),
        sc.BACKLOG_CLAIM_P99_FACTOR,
        sc.BACKLOG_CLAIM_P99_SLACK_MS,
    )
    out.append(
        _row(
            name,
            f"claim latency with {rows_label} matches {base['name']}",
            f"mean {fmt(cg.get('mean_ms'), 2)} vs {fmt(cb.get('mean_ms'), 2)} ms, "
            f"p99 {fmt(cg.get('p99_ms'), 2)} vs {fmt(cb.get('p99_ms'), 2)} ms",
            ok,
        )
    )
    lb = lookup(base, "summary", "lateness_ms") or {}
    lg = lookup(big, "summary", "lateness_ms") or {}
    early = lookup(big, "summary", "early", "early_count")
    p99, p999 = lg.get("p99"), lg.get("p99_9")
    ok = (
        _within(p99, lb.get("p99"), 1.0, sc.BACKLOG_P99_SLACK_MS)
        and _within(p999, lb.get("p99_9"), 1.0, sc.BACKLOG_P999_SLACK_MS)
        and p99 is not None
        and p99 <= sc.PRECISION_P99_MS
        and p999 is not None
        and p999 <= sc.PRECISION_P999_MS
        and early == 0
    )
    out.append(
        _row(
            name,
            f"precision with {rows_label} matches {base['name']} (p99 within "
            f"+{sc.BACKLOG_P99_SLACK_MS:g} ms, p99.9 within +{sc.BACKLOG_P999_SLACK_MS:g} ms, "
            "and on target)",
            f"p99 {fmt(lg.get('p99'))} vs {fmt(lb.get('p99'))} ms, p99.9 "
            f"{fmt(lg.get('p99_9'))} vs {fmt(lb.get('p99_9'))} ms, {fmt(early)} early",
            ok,
        )
    )
    rss = big.get("rss_max_mb")
    out.append(
        _row(
            name,
            f"node RSS < {sc.RSS_LIMIT_MB:.0f} MB with {rows_label}",
            f"{fmt(rss, 0)} MB (baseline {fmt(base.get('rss_max_mb'), 0)} MB)",
            rss is not None and rss < sc.RSS_LIMIT_MB,
        )
    )
    return out
