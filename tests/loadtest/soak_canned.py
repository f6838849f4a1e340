"""A canned soak for the analysis's tests: ten minutes of sending at 10 records/s, sampled every
10 s, with figures known by construction (``write_soak``), and its samples alone
(``samples``) for the verdicts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loadtest.analysis.soak.samples import PgSample, SoakSample
from loadtest.harness.events import (
    FOLLOWUPS_FILE,
    FOLLOWUPS_SCHEMA,
    RECEIVED_SCHEMA,
    SENT_SCHEMA,
)

BASE = 1_700_000_000_000  # the first send (epoch ms)
SEND_S = 600  # ten minutes: the windows are its first and last fifth, 120 s each
MESSAGES = 6000  # one every 100 ms, due 5 s later
LOST = 100  # r-100 never fires
DUPLICATE = 200  # r-200 fires twice


def lateness_of(n: int) -> int:
    """Lateness of message n: 5 ms when due in the first half of the sending, 9 ms after,
    except 40 ms for one message in 200 (0.5 %: above the p99, below the p99.9)."""
    due_s = (n * 100 + 5000) / 1000
    if n % 200 == 0:
        return 40
    return 5 if due_s < 300 else 9


def samples(
    pss: Callable[[int], float] = lambda t: 100.0,
    bytes_per_row: Callable[[int], float] = lambda t: 400.0,
    wal_per_change: Callable[[int], float] = lambda t: 300.0,
    final_rows: int = 0,
) -> list[SoakSample]:
    """A sample every 10 s from the first send to 60 s after the last, and a final one. Each
    node uses 0.5 cores, Postgres 0.25, the broker 0.1, the load generator 0.2, the machine 1.8;
    50 live rows; 30 row changes a second."""
    out: list[SoakSample] = []
    wal = changes = 0.0
    for t in range(0, SEND_S + 70, 10):
        changes_now = 30 * 10 if t else 0
        wal += wal_per_change(t) * changes_now
        changes += changes_now
        live = 50 if t <= SEND_S else 0
        out.append(
            SoakSample(
                t_ms=BASE + t * 1000,
                pss_mb={0: pss(t), 1: pss(t)},
                cpu_s={0: t * 0.5, 1: t * 0.5},
                consumer_lag=3.0,
                fired_total=float(10 * t),
                pg=PgSample(
                    total_bytes=int(bytes_per_row(t) * max(live, 50)),
                    index_bytes=8192,
                    table_bytes=16384,
                    live_rows=live,
                    dead_rows=5,
                    autovacuum_count=t // 120,
                    autoanalyze_count=0,
                    rows_inserted=int(changes / 3),
                    rows_updated=int(changes / 3),
                    rows_deleted=int(changes - 2 * int(changes / 3)),
                    wal_bytes=int(wal),
                ),
                postgres_cpu_s=t * 0.25,
                broker_cpu_s=t * 0.1,
                broker_log_bytes=1024 * t,
                load_generator_cpu_s=t * 0.2,
                machine_cpu_s=t * 1.8,
            )
        )
    last = out[-1]
    assert last.pg is not None
    final_pg = PgSample(*(getattr(last.pg, f) for f in PgSample.__slots__))
    out.append(
        SoakSample(
            t_ms=last.t_ms + 5000,
            pss_mb=last.pss_mb,
            cpu_s=last.cpu_s,
            pg=PgSample(**{**_fields(final_pg), "live_rows": final_rows}),
            final=True,
        )
    )
    return out


def _fields(pg: PgSample) -> dict[str, Any]:
    return {f: getattr(pg, f) for f in PgSample.__slots__}


def write_soak(path: Path, sampled: list[SoakSample] | None = None) -> None:
    """A soak's results directory: events/, samples.jsonl, soak.json."""
    events = path / "events"
    events.mkdir(parents=True)
    sent: list[dict[str, Any]] = []
    received: list[dict[str, Any]] = []

    def fire(mid: str, deadline: int, late: int, offset: int) -> None:
        received.append(
            {"id": mid, "topic": "out", "partition": 0, "offset": offset,
             "deadline_ms": deadline, "publish_ms": deadline + late,
             "receive_ms": deadline + late + 2, "is_dead_letter": False,
             "dead_letter_reason": None, "tenant": "soak-00"}
        )  # fmt: skip

    for n in range(MESSAGES):
        sent_ms = BASE + n * 100
        deadline = sent_ms + 5000
        sent.append(
            {"id": f"r-{n}", "key": "key-0", "deadline_ms": deadline, "sent_ms": sent_ms,
             "payload_bytes": 100, "slot_ms": sent_ms, "tenant": "soak-00"}
        )  # fmt: skip
        if n != LOST:
            fire(f"r-{n}", deadline, lateness_of(n), n)
    fire(f"r-{DUPLICATE}", BASE + DUPLICATE * 100 + 5000, 900, 99_999)
    fire("r--1", BASE + 10_000, 0, 100_000)  # a cancelled message fired
    fire("r--3", BASE + 10_000, 0, 100_001)  # another
    fire("r--2", BASE + 20_000, 0, 100_002)  # a schedule a reschedule replaced
    # A reschedule and a cancel that reached their messages while claimed (the nodes logged
    # it): not applied, by contract, so the first schedules fire and the reschedule's own fire
    # (r-6000, in the sent log) never comes; neither is a loss nor a forbidden fire.
    sent.append(
        {"id": f"r-{MESSAGES}", "key": "key-0", "deadline_ms": BASE + 30_000,
         "sent_ms": BASE + 20_000, "payload_bytes": 100, "slot_ms": BASE + 20_000,
         "tenant": "soak-00"}
    )  # fmt: skip
    fire("r--4", BASE + 25_000, 0, 100_003)
    fire("r--5", BASE + 26_000, 0, 100_004)
    followups = [
        ("r-m1", "r--1", None),  # not logged as claimed: its fire still counts
        ("r-m3", "r--3", None),
        ("r-m2", "r--2", None),
        ("r-m7", "r--4", f"r-{MESSAGES}"),
        ("r-m9", "r--5", None),
    ]
    pq.write_table(
        pa.Table.from_pylist(
            [{"message_id": m, "never_id": n, "fire_id": f} for m, n, f in followups],
            schema=FOLLOWUPS_SCHEMA,
        ),
        events / FOLLOWUPS_FILE,
    )
    node_log = [
        {"event": "partitions_assigned", "message": "assigned _claimed"},
        {"event": "action_reschedule_claimed", "message_id": "r-m7"},
        {"event": "action_cancel_claimed", "message_id": "r-m9"},
    ]
    (path / "node-0.log").write_text("\n".join(map(json.dumps, node_log)) + "\nnot json _claimed\n")
    pq.write_table(pa.Table.from_pylist(sent, schema=SENT_SCHEMA), events / "sent.parquet")
    pq.write_table(
        pa.Table.from_pylist(received, schema=RECEIVED_SCHEMA), events / "received.parquet"
    )
    run = {
        "run_id": "r",
        "start_ms": BASE,
        "end_ms": BASE + (SEND_S + 60) * 1000,
        "params": {"timing_advance_ms": 50, "rate": 10.0},
        "producer": {"start_ms": BASE, "end_ms": BASE + SEND_S * 1000, "sent": MESSAGES,
                     "mix": {"records": MESSAGES, "cancelled": 2, "rescheduled": 1}},
    }  # fmt: skip
    (events / "run.json").write_text(json.dumps(run))
    lines = [json.dumps(s.as_dict()) for s in (sampled if sampled is not None else samples())]
    (path / "samples.jsonl").write_text("\n".join(lines) + "\n")
    soak = {"command": "python -m loadtest soak --duration 10m", "load": {"rate": 10.0},
            "drain": {"rows_left": 0}}  # fmt: skip
    (path / "soak.json").write_text(json.dumps(soak))
