"""Synthetic results directories with known properties, for testing and timing the analysis.

Every message is sent on an exact schedule (plus 0-2 ms of send lag) and is then, independently:
lost (``lost_fraction``), dead-lettered (``dead_letter_fraction``) or fired. A fired message is
late by ``-advance + U{0..99} + round(Exp(late_mean_ms))`` ms, or early (``early_fraction``:
``-advance - U{1..1000}``), or in the tail (``tail_fraction``: ``U{500..3000}``); a fraction
(``duplicate_fraction``) is fired twice. ``expected.json`` holds the exact metrics computed
independently with numpy, so the Spark analysis can be checked against it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loadtest.harness.delays import Delay, FixedDelay, MixDelay, UniformDelay
from loadtest.harness.events import RECEIVED_FILE, RECEIVED_SCHEMA, RUN_FILE, SENT_FILE, SENT_SCHEMA
from loadtest.harness.tenants import FLOOD, small_name

CHUNK = 1_000_000
START_MS = 1_700_000_000_000
OUTPUT, DEAD_LETTER = "chronos-output", "chronos-dead-letter"


@dataclass(frozen=True, slots=True)
class SynthSpec:
    count: int
    rate: float = 10_000.0
    delay: Delay = field(default_factory=lambda: UniformDelay(3000, 10000))
    lost_fraction: float = 0.001
    duplicate_fraction: float = 0.002
    dead_letter_fraction: float = 0.0005
    early_fraction: float = 0.001
    tail_fraction: float = 0.001
    late_mean_ms: float = 20.0
    timing_advance_ms: int = 50
    seed: int = 1
    start_ms: int = START_MS
    small_tenants: int = 0  # > 0: every (n+1)-th message is the flood's, the rest small tenants'


def _tenants(spec: SynthSpec, seq: np.ndarray) -> pa.Array:
    """The tenant of each message (null without tenants): ``flood`` and ``small-NN`` in turn."""
    if spec.small_tenants <= 0:
        return pa.nulls(len(seq), pa.string())
    names = pa.array([FLOOD, *(small_name(i) for i in range(spec.small_tenants))], pa.string())
    return names.take(pa.array(seq % (spec.small_tenants + 1)))


def _ids(seq: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise("synth-", pc.cast(pa.array(seq), pa.string()), "")


def _seconds(counter: Counter[tuple[str, int]], kind: str, t: np.ndarray, base: int) -> None:
    secs, counts = np.unique(np.floor_divide(t - base, 1000), return_counts=True)
    for s, c in zip(secs.tolist(), counts.tolist(), strict=True):
        counter[(kind, s)] += c


def _deadlines(spec: SynthSpec, sent: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    d = spec.delay
    if isinstance(d, FixedDelay):
        return sent + d.delay_ms
    if isinstance(d, UniformDelay):
        return sent + rng.integers(d.low_ms, d.high_ms + 1, size=len(sent))
    if isinstance(d, MixDelay):
        weights = np.array([w for w, _ in d.parts], dtype=np.float64)
        pick = rng.choice(len(d.parts), size=len(sent), p=weights / weights.sum())
        lows = np.array([p.low_ms for _, p in d.parts], dtype=np.int64)[pick]
        highs = np.array([p.high_ms for _, p in d.parts], dtype=np.int64)[pick]
        return sent + lows + (rng.random(len(sent)) * (highs - lows + 1)).astype(np.int64)
    return np.full(len(sent), spec.start_ms + d.at_ms, dtype=np.int64)


def write_synthetic(spec: SynthSpec, out: Path, *, expected: bool = True) -> dict[str, Any]:
    """Write ``sent.parquet``, ``received.parquet``, ``run.json`` (and ``expected.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    adv = spec.timing_advance_ms
    sent_writer = pq.ParquetWriter(str(out / SENT_FILE), SENT_SCHEMA, compression="zstd")
    recv_writer = pq.ParquetWriter(str(out / RECEIVED_FILE), RECEIVED_SCHEMA, compression="zstd")
    late_parts: list[np.ndarray] = []
    e2e_parts: list[np.ndarray] = []
    lag_parts: list[np.ndarray] = []
    timeline: Counter[tuple[str, int]] = Counter()
    totals: Counter[str] = Counter()
    offsets = {OUTPUT: 0, DEAD_LETTER: 0}
    base = spec.start_ms
    for first in range(0, spec.count, CHUNK):
        seq = np.arange(first, min(spec.count, first + CHUNK), dtype=np.int64)
        n = len(seq)
        slot = spec.start_ms + (seq * 1000 / spec.rate).astype(np.int64)
        sent_ms = slot + rng.integers(0, 3, size=n)
        deadline = _deadlines(spec, sent_ms, rng)
        ids = _ids(seq)
        sent_writer.write_table(
            pa.table(
                {
                    "id": ids,
                    "key": pa.array([f"key-{i}" for i in range(1000)]).take(pa.array(seq % 1000)),
                    "deadline_ms": deadline,
                    "sent_ms": sent_ms,
                    "payload_bytes": np.full(n, 100, dtype=np.int32),
                    "slot_ms": slot,
                    "tenant": _tenants(spec, seq),
                },
                schema=SENT_SCHEMA,
            )
        )
        lag_parts.append(sent_ms - slot)
        _seconds(timeline, "sent", sent_ms, base)
        _seconds(timeline, "due", deadline, base)

        u = rng.random(n)
        lost = u < spec.lost_fraction
        dead = (~lost) & (u < spec.lost_fraction + spec.dead_letter_fraction)
        fired = ~(lost | dead)
        nf = int(fired.sum())
        v = rng.random(nf)
        early = v < spec.early_fraction
        tail = (~early) & (v < spec.early_fraction + spec.tail_fraction)
        late = (
            -adv
            + rng.integers(0, 100, size=nf)
            + np.rint(rng.exponential(spec.late_mean_ms, size=nf)).astype(np.int64)
        )
        late = np.where(early, -adv - rng.integers(1, 1001, size=nf), late)
        late = np.where(tail, rng.integers(500, 3001, size=nf), late)
        f_deadline = deadline[fired]
        publish = f_deadline + late
        receive = publish + rng.integers(1, 6, size=nf)
        dup = rng.random(nf) < spec.duplicate_fraction
        nd = int(dup.sum())
        d_publish = publish[dup] + rng.integers(0, 2001, size=nd)
        d_receive = d_publish + rng.integers(1, 6, size=nd)
        dl_seq = seq[dead]
        dl_publish = sent_ms[dead] + rng.integers(1, 20, size=len(dl_seq))
        dl_receive = dl_publish + rng.integers(1, 6, size=len(dl_seq))

        f_seq = np.concatenate([seq[fired], seq[fired][dup]])
        out_n = len(f_seq)
        dl_n = len(dl_seq)
        all_seq = np.concatenate([f_seq, dl_seq])
        is_dead = np.concatenate([np.zeros(out_n, bool), np.ones(dl_n, bool)])
        out_off = offsets[OUTPUT] + np.arange(out_n, dtype=np.int64)
        dl_off = offsets[DEAD_LETTER] + np.arange(dl_n, dtype=np.int64)
        offsets[OUTPUT] += out_n
        offsets[DEAD_LETTER] += dl_n
        recv_writer.write_table(
            pa.table(
                {
                    "id": _ids(all_seq),
                    "topic": pa.array([OUTPUT, DEAD_LETTER]).take(pa.array(is_dead.astype(int))),
                    "partition": (all_seq % 3).astype(np.int32),
                    "offset": np.concatenate([out_off, dl_off]),
                    "deadline_ms": np.concatenate([f_deadline, f_deadline[dup], deadline[dead]]),
                    "publish_ms": np.concatenate([publish, d_publish, dl_publish]),
                    "receive_ms": np.concatenate([receive, d_receive, dl_receive]),
                    "is_dead_letter": is_dead,
                    "dead_letter_reason": pa.array(
                        [None] * out_n + ["synthetic rejection"] * dl_n, pa.string()
                    ),
                    "tenant": _tenants(spec, all_seq),
                },
                schema=RECEIVED_SCHEMA,
            )
        )
        _seconds(timeline, "fired", np.concatenate([publish, d_publish]), base)
        _seconds(timeline, "received", np.concatenate([receive, d_receive]), base)
        late_parts.append(late)
        e2e_parts.append(receive - f_deadline)
        totals.update(
            sent=n,
            lost=int(lost.sum()),
            dead_lettered=len(dl_seq),
            fired=nf,
            duplicate_ids=nd,
            early=int((late < -adv).sum()),
            before_deadline=int((late < 0).sum()),
        )
    sent_writer.close()
    recv_writer.close()
    run = {
        "run_id": f"synthetic-{spec.seed}",
        "start_ms": spec.start_ms,
        "synthetic": True,
        "params": {
            "rate": spec.rate,
            "count": spec.count,
            "delay": spec.delay.describe(),
            "timing_advance_ms": adv,
            "behind_threshold_ms": 10.0,
            "payload_bytes": 100,
            "keys": 1000,
        },
    }
    (out / RUN_FILE).write_text(json.dumps(run, indent=2) + "\n")
    result: dict[str, Any] = {}
    if expected:
        result = _expected(spec, totals, late_parts, e2e_parts, lag_parts, timeline)
        (out / "expected.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _pct(values: np.ndarray) -> dict[str, float | int | None]:
    if len(values) == 0:
        return {"count": 0}
    p = np.percentile(values, [50, 90, 99, 99.9])
    return {
        "count": len(values),
        "min": int(values.min()),
        "mean": float(values.mean()),
        "p50": float(p[0]),
        "p90": float(p[1]),
        "p99": float(p[2]),
        "p99_9": float(p[3]),
        "max": int(values.max()),
    }


def _expected(
    spec: SynthSpec,
    totals: Counter[str],
    late_parts: list[np.ndarray],
    e2e_parts: list[np.ndarray],
    lag_parts: list[np.ndarray],
    timeline: Counter[tuple[str, int]],
) -> dict[str, Any]:
    late = np.concatenate(late_parts) if late_parts else np.zeros(0, np.int64)
    e2e = np.concatenate(e2e_parts) if e2e_parts else np.zeros(0, np.int64)
    lag = np.concatenate(lag_parts) if lag_parts else np.zeros(0, np.int64)
    seconds = sorted({s for _, s in timeline})
    return {
        "counts": {
            "sent": totals["sent"],
            "fired_distinct": totals["fired"],
            "output_records": totals["fired"] + totals["duplicate_ids"],
            "lost": totals["lost"],
            "dead_lettered": totals["dead_lettered"],
            "dead_letter_records": totals["dead_lettered"],
            "duplicate_ids": totals["duplicate_ids"],
            "duplicate_extra_copies": totals["duplicate_ids"],
            "unexpected_ids": 0,
        },
        "lateness_ms": _pct(late),
        "receive_lateness_ms": _pct(e2e),
        "early": {
            "early_count": totals["early"],
            "before_deadline_count": totals["before_deadline"],
        },
        "within_limit": int((np.abs(late) <= 500).sum()),
        "send_lag_max_ms": int(lag.max()) if len(lag) else None,
        "timeline": [
            {
                "second": s,
                **{k: timeline.get((k, s), 0) for k in ("sent", "due", "fired", "received")},
            }
            for s in range(seconds[0], seconds[-1] + 1)
        ]
        if seconds
        else [],
    }
