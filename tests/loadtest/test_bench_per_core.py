"""Messages per core-second of each component (``per_core``): the figure, its record in
``bench.json`` and its table in ``BENCHMARK.md``, the ceiling's CPU included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.bench import driver, procstats
from loadtest.bench.records import BenchRecord
from loadtest.bench.report import headline_rate, render_markdown
from loadtest.bench.results.cpu import CpuUsage, PerCore, per_core
from loadtest.bench.runs import ceiling_cpu
from tests.loadtest.processes import cpu_close, reported_cpu, start_burner


def test_messages_per_cpu_second_of_each_component() -> None:
    cpu = CpuUsage(wall_s=50.0, nodes_s=20.0, postgres_s=8.0, broker_s=5.0, harness_s=3.0)
    pc = per_core(cpu, 400_000)
    assert pc is not None
    # 400,000 messages over 8 Postgres CPU seconds: one Postgres core carries 50,000 msg/s.
    assert (pc.postgres, pc.node, pc.broker) == (50_000, 20_000, 80_000)
    assert pc.handled_per_s == 8_000.0
    assert (pc.postgres_cores, pc.node_cores, pc.broker_cores) == (0.16, 0.4, 0.1)
    # The same as 1e6 / µs per message.
    per = procstats.cpu_per_message(cpu, 400_000)
    assert per.postgres_us is not None and pc.postgres == round(1e6 / per.postgres_us)


def test_no_figure_without_cpu_or_messages() -> None:
    cpu = CpuUsage(wall_s=5.0, nodes_s=2.0, postgres_s=1.0, broker_s=None)
    assert per_core(None, 10) is None
    assert per_core(cpu, 0) is None
    assert per_core(cpu, None) is None
    pc = per_core(cpu, 10_000)
    assert pc is not None
    assert pc.broker is None and pc.broker_cores is None  # no broker: no figure, not infinity
    assert per_core(CpuUsage(wall_s=5.0, postgres_s=0.0), 10) == PerCore(
        messages=10, wall_s=5.0, handled_per_s=2.0, postgres_cores=0.0
    )


@pytest.mark.parametrize("messages", [1, 1_000_000])
def test_per_core_round_trips(messages: int) -> None:
    pc = per_core(CpuUsage(wall_s=10.0, nodes_s=1.0, postgres_s=0.5, broker_s=0.25), messages)
    assert pc is not None
    assert PerCore.from_dict(pc.as_dict()) == pc


def test_ceiling_cpu_stands_the_store_client_where_the_nodes_are() -> None:
    cpu = ceiling_cpu(5.004, 2.5, 1.25)
    assert (cpu.wall_s, cpu.nodes_s, cpu.postgres_s, cpu.broker_s) == (5.0, 2.5, 1.25, None)
    pc = per_core(cpu, 100_000)
    assert pc is not None and (pc.postgres, pc.node, pc.broker) == (80_000, 40_000, None)


def _record(name: str, kind: str, cpu: CpuUsage, messages: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "status": "ok",
        "nodes": 1,
        "cpu": cpu.as_dict(),
        "cpu_per_message": procstats.cpu_per_message(cpu, messages).as_dict(),
        **extra,
    }


def test_outputs_carry_the_per_core_figures(tmp_path: Path) -> None:
    bench = {
        "command": "python -m loadtest bench",
        "scenarios": [
            _record(
                "ceiling",
                "ceiling",
                ceiling_cpu(5.0, 2.0, 1.0),
                150_000,
                result={"ceiling_msg_per_s": 30_000.0},
            ),
            _record(
                "sustained",
                "sustained",
                CpuUsage(wall_s=40.0, nodes_s=30.0, postgres_s=6.0, broker_s=12.0),
                300_000,
                steady={"fired_per_s": 9_950.0},
            ),
            _record(
                "burst-200k",
                "burst",
                CpuUsage(wall_s=60.0, nodes_s=25.0, postgres_s=20.0, broker_s=10.0),
                200_000,
                drain={"rate_per_s": 12_500.0, "seconds": 16.0},
            ),
        ],
    }
    driver.write_outputs(tmp_path, bench)
    saved = json.loads((tmp_path / "bench.json").read_text())
    figures = {r["name"]: r["per_core"] for r in saved["scenarios"]}
    assert figures["sustained"]["msg_per_postgres_cpu_s"] == 50_000
    assert figures["sustained"]["msg_per_node_cpu_s"] == 10_000
    assert figures["sustained"]["msg_per_broker_cpu_s"] == 25_000
    assert figures["burst-200k"]["msg_per_postgres_cpu_s"] == 10_000
    assert figures["ceiling"]["msg_per_postgres_cpu_s"] == 150_000
    assert figures["ceiling"]["msg_per_broker_cpu_s"] is None
    md = (tmp_path / "BENCHMARK.md").read_text()
    assert "| msg per Postgres core-s | msg per node core-s | msg per broker core-s |" in md
    assert (
        "| sustained | 1 | 9,950 (steady fired) | 7,500.0 | 50,000 | 10,000 | 25,000 | "
        "0.15 / 0.75 / 0.30 |"
    ) in md
    assert "| burst-200k | 1 | 12,500 (drain) | 3,333.3 | 10,000 | 8,000 | 20,000 |" in md
    assert "| ceiling | 1 | 30,000 (ceiling) | 30,000.0 | 150,000 | 75,000 | n/a |" in md


def test_render_adds_the_figures_to_an_older_run(tmp_path: Path) -> None:
    """A run recorded before the figures existed gets them from its CPU and messages."""
    cpu = CpuUsage(wall_s=10.0, nodes_s=4.0, postgres_s=2.0, broker_s=1.0)
    rec = _record("precision", "precision", cpu, 10_000)
    (tmp_path / "bench.json").write_text(json.dumps({"scenarios": [rec]}))
    assert driver.render(tmp_path) == 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["scenarios"][0]["per_core"]["msg_per_postgres_cpu_s"] == 5_000


def test_headline_rate_of_each_kind() -> None:
    bench = BenchRecord.from_dict(
        {
            "scenarios": [
                {"name": "c", "kind": "ceiling", "result": {"ceiling_msg_per_s": 1.0}},
                {"name": "s", "kind": "sustained", "steady": {"fired_per_s": 2.0}},
                {"name": "b", "kind": "burst", "drain": {"rate_per_s": 3.0}},
                {"name": "p", "kind": "precision"},
            ]
        }
    )
    assert [headline_rate(r) for r in bench.scenarios] == [
        (1.0, "ceiling"),
        (2.0, "steady fired"),
        (3.0, "drain"),
        (None, ""),
    ]
    assert "Messages per core-second" not in render_markdown(bench)


def test_the_benchmarks_own_sampler_is_left_out_of_postgres_figures() -> None:
    """The sampler's count of the waiting rows every second is the benchmark's cost, not
    Chronos's: Postgres's figures per message and per core-second leave it out."""
    cpu = CpuUsage(wall_s=10.0, nodes_s=4.0, postgres_s=3.0, sampler_postgres_s=1.0)
    assert cpu.chronos_postgres_s == 2.0
    pc = per_core(cpu, 100_000)
    assert pc is not None and pc.postgres == 50_000 and pc.postgres_cores == 0.2
    assert procstats.cpu_per_message(cpu, 100_000).postgres_us == 20.0
    assert CpuUsage.from_dict(cpu.as_dict()) == cpu
    # An older record without the sampler's share: all of Postgres's counts.
    older = CpuUsage(wall_s=10.0, postgres_s=3.0)
    assert older.chronos_postgres_s == 3.0
    assert per_core(older, 30_000) == PerCore(
        messages=30_000, wall_s=10.0, handled_per_s=3_000.0, postgres=10_000, postgres_cores=0.3
    )


def test_sampler_counts_the_cpu_of_its_own_backend() -> None:
    """``Sampler`` reads the CPU of the server process answering it (here a stand-in process
    burning 0.3 s), by the backend pid its connection reports."""
    from types import SimpleNamespace

    from loadtest.bench.sampling import Sampler

    child = start_burner()
    try:
        sampler = Sampler("postgresql://unused/x", [])
        assert sampler.postgres_cpu_s == 0.0
        burned = reported_cpu(child)
        conn = SimpleNamespace(info=SimpleNamespace(backend_pid=child.pid))
        sampler.note_backend(conn)
        assert cpu_close(sampler.postgres_cpu_s, burned), (sampler.postgres_cpu_s, burned)
        sampler.note_backend(conn)  # read again: the backend's figure, not a second one
        assert cpu_close(sampler.postgres_cpu_s, burned), (sampler.postgres_cpu_s, burned)
    finally:
        child.kill()
        child.wait()
