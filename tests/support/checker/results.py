"""The fault suite's results: one file per scenario, and the "Reliability" table of
docs/benchmark-results.md made of them."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.checker.analysis import Report

RESULTS_DIR = Path(__file__).resolve().parents[3] / ".chronos" / "reliability"


@dataclass
class ScenarioResult:
    """One row of the fault-suite table of docs/benchmark-results.md."""

    scenario: str
    fault: str
    sent: int
    lost: int
    duplicated: int
    early: int
    recovery_s: float | None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        scenario: str,
        fault: str,
        report: Report,
        recovery_s: float | None,
        **details: Any,
    ) -> ScenarioResult:
        return cls(
            scenario,
            fault,
            report.sent,
            len(report.lost),
            report.duplicates,
            len(report.early),
            None if recovery_s is None else round(recovery_s, 2),
            {**report.as_dict(), **details},
        )


def record_result(result: ScenarioResult, directory: Path | None = None) -> Path:
    """Write ``<directory>/<scenario>.json`` (default ``.chronos/reliability``)."""
    directory = directory or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.scenario}.json"
    payload = {**asdict(result), "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def render_table(directory: Path | None = None) -> str:
    """The fault-suite table (docs/benchmark-results.md) from the result files, by scenario."""
    directory = directory or RESULTS_DIR
    rows = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    lines = [
        "| scenario | fault | messages sent | lost | duplicated | early | recovery time |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        recovery = "—" if r.get("recovery_s") is None else f"{r['recovery_s']:.1f} s"
        lines.append(
            f"| {r['scenario']} | {r['fault']} | {r['sent']} | {r['lost']} | {r['duplicated']} "
            f"| {r['early']} | {recovery} |"
        )
    return "\n".join(lines)
