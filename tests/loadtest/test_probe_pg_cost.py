"""The pg_cost probe: one phase's figures per message from two snapshots, their report, and
its command line."""

from __future__ import annotations

import sys

import pytest

from loadtest.probes import pg_cost
from loadtest.probes.pg_cost_figures import SizeResult, Snapshot, phase, render


def _snap(wall: float, cpu: float, calls: float, wal: float, ins: float) -> Snapshot:
    return Snapshot(
        wall=wall,
        postgres_cpu={"client backend": cpu, "autovacuum worker": cpu / 10},
        client_cpu=cpu / 2,
        statements={"enqueue_batch": [calls, calls * 100, 50.0 * calls] + [0.0] * 7},
        wal=[wal, 0.0, wal * 100, 0.0],
        io={"client backend": [1.0, 0.0, 0.0, 0.0, 0.0]},
        checkpointer=[0.0] * 5,
        table=[ins, 0.0, 0.0, 0.0, 0.0, 0.0, 8192.0, 16384.0],
    )


def test_a_phase_gives_its_figures_per_message() -> None:
    a, b = _snap(10.0, 1.0, 0, 0, 0), _snap(12.5, 2.0, 10, 1000, 1000)
    ph = phase("enqueue", 1000, 1000, a, b)
    assert ph.wall_s == 2.5
    assert ph.postgres_cpu_by_kind_us == {"autovacuum worker": 100.0, "client backend": 1000.0}
    assert ph.postgres_cpu_us == 1100.0
    assert ph.client_cpu_us == 500.0
    assert ph.statements["enqueue_batch"]["calls"] == 10
    assert ph.statements["enqueue_batch"]["exec_us"] == 500.0  # 500 ms over 1,000 messages
    assert ph.wal["records"] == 1.0 and ph.wal["bytes"] == 100.0
    assert ph.table["ins"] == 1000 and ph.table["total_bytes"] == 16384.0
    assert "client backend" not in ph.io  # nothing written in the phase
    report = render([SizeResult(1000, 0, [ph], {"pk": 2**20})], [("pk", "CREATE INDEX pk")])
    assert "burst of 1,000 messages" in report and "pk 1.0 MB" in report


def test_the_command_line_answers_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["pg_cost", "--help"])
    with pytest.raises(SystemExit) as exit_:
        pg_cost.main()
    assert exit_.value.code == 0
    assert "--server-setting" in capsys.readouterr().out
