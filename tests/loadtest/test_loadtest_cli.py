from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.cli import build_parser, main
from loadtest.harness.delays import FixedDelay, UniformDelay


def test_run_options() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "--bootstrap",
            "broker:9093",
            "--rate",
            "500",
            "--duration",
            "2m",
            "--delay",
            "uniform:3s-10s",
            "--payload-bytes",
            "1024",
            "--keys",
            "null",
            "--drain-timeout",
            "45s",
            "--grace",
            "2m",
            "--kafka-property",
            "security.protocol=SSL",
            "--kafka-property",
            "client.id=x=y",
            "--out",
            "/tmp/x",
        ]
    )
    assert args.command == "run"
    assert args.bootstrap == "broker:9093"
    assert args.rate == 500.0
    assert args.duration == 120.0
    assert args.count is None
    assert args.delay == UniformDelay(3000, 10_000)
    assert args.payload_bytes == 1024
    assert args.keys is None
    assert args.drain_timeout == 45.0
    assert args.grace == 120.0
    assert dict(args.kafka_property) == {"security.protocol": "SSL", "client.id": "x=y"}
    assert args.out == Path("/tmp/x")
    assert args.timing_advance_ms == 50


def test_run_defaults() -> None:
    args = build_parser().parse_args(["run"])
    assert args.bootstrap == "localhost:9092"
    assert (args.input_topic, args.output_topic, args.dead_letter_topic) == (
        "chronos-input",
        "chronos-output",
        "chronos-dead-letter",
    )
    assert args.delay == FixedDelay(3000)
    assert args.keys == 1000
    assert (args.drain_timeout, args.grace) == (30.0, 60.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--delay", "uniform:10s-3s"], "minimum 10000 ms exceeds maximum 3000 ms"),
        (["run", "--delay", "sometime"], "missing ':<value>'"),
        (["run", "--rate", "0"], "must be a positive number"),
        (["run", "--duration", "1s", "--count", "5"], "not allowed with argument"),
        (["run", "--kafka-property", "novalue"], "expected NAME=VALUE"),
        (["run", "--keys", "-3"], "must be >= 0"),
    ],
)
def test_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_analyze_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Fails before starting Spark: no sent.parquet.
    from loadtest.analysis import summary

    with pytest.raises(RuntimeError, match=r"sent\.parquet not found"):
        summary.analyze_dir(None, tmp_path)  # type: ignore[arg-type]


def test_run_refuses_unknown_broker_topics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "old").write_text("x")
    code = main(["run", "--bootstrap", "127.0.0.1:1", "--count", "1", "--out", str(out)])
    assert code == 2
    assert "is not empty" in capsys.readouterr().err
