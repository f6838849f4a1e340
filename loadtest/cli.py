"""Command line: ``python -m loadtest {run,analyze,synth,relay,ceiling,bench,soak}``."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from loadtest.harness import mix
from loadtest.harness.delays import BurstDelay, DelaySpecError, parse_delay
from loadtest.harness.tenants import TenantLoad
from loadtest.harness.timeutil import DurationError, parse_duration_ms

DEFAULT_RESULTS = Path("loadtest/results")


def _duration_s(text: str) -> float:
    try:
        return parse_duration_ms(text) / 1000
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def _keys(text: str) -> int | None:
    if text.strip().lower() in ("null", "none", "0"):
        return None
    value = _non_negative_int(text)
    return value


def _delay(text: str) -> object:
    try:
        return parse_delay(text)
    except DelaySpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _property(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def _add_kafka_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", default="localhost:9092", help="bootstrap servers")
    p.add_argument("--input-topic", default="chronos-input")
    p.add_argument("--output-topic", default="chronos-output")
    p.add_argument(
        "--dead-letter-topic",
        default="chronos-dead-letter",
        help="dead-letter topic to record ('' to ignore dead letters)",
    )
    p.add_argument(
        "--kafka-property",
        action="append",
        type=_property,
        default=[],
        metavar="NAME=VALUE",
        help="librdkafka property for every client (repeatable), e.g. security.protocol=SSL",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest", description="Load tests for the Chronos delay scheduler."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="produce at a target rate and record the output")
    _add_kafka_options(run)
    run.add_argument("--rate", type=_positive_float, default=1000.0, help="messages per second")
    amount = run.add_mutually_exclusive_group()
    amount.add_argument("--duration", type=_duration_s, help="how long to send (default 60s)")
    amount.add_argument("--count", type=_non_negative_int, help="how many messages to send")
    run.add_argument(
        "--delay",
        type=_delay,
        default=parse_delay("fixed:3s"),
        help="fixed:3s | uniform:3s-10s | burst:20s | mix:70%%1s-60s,30%%1m-10m (default fixed:3s)",
    )
    run.add_argument("--payload-bytes", type=_non_negative_int, default=100)
    run.add_argument(
        "--keys", type=_keys, default=1000, help="distinct keys (round robin); 'null' for null keys"
    )
    run.add_argument(
        "--drain-timeout",
        type=_duration_s,
        default=30.0,
        help="keep consuming this long after the last deadline (default 30s): the window",
    )
    run.add_argument(
        "--grace",
        type=_duration_s,
        default=60.0,
        help="then, while messages are missing, at most this much longer (default 60s); what "
        "arrives then is late, not lost",
    )
    run.add_argument(
        "--timing-advance-ms",
        type=_non_negative_int,
        default=50,
        help="Chronos's timing advance, recorded for the analysis (default 50)",
    )
    run.add_argument(
        "--linger-ms",
        type=_non_negative_int,
        default=5,
        help="the input producer's linger.ms (default 5): how long it gathers records into one "
        "batch per partition",
    )
    run.add_argument(
        "--behind-threshold-ms",
        type=_positive_float,
        default=10.0,
        help="a message sent this much after its slot counts as 'behind' (default 10)",
    )
    run.add_argument(
        "--start-from",
        choices=("end", "beginning"),
        default="end",
        help="where to start reading the output topics (records of other runs are ignored)",
    )
    run.add_argument(
        "--create-topics",
        type=_non_negative_int,
        metavar="PARTITIONS",
        help="create missing topics with this many partitions",
    )
    tenants = run.add_argument_group(
        "multi-tenant load (with --small-tenants: one tenant's flood due at one instant, sent at "
        "--rate, while small tenants send steadily for --duration; --delay is not used)"
    )
    tenants.add_argument("--flood-count", type=_non_negative_int, default=0, help="the flood")
    tenants.add_argument(
        "--flood-at",
        type=_duration_s,
        default=30.0,
        help="the flood is due this long after the start",
    )
    tenants.add_argument("--small-tenants", type=_non_negative_int, default=0, help="how many")
    tenants.add_argument(
        "--small-rate", type=_positive_float, default=10.0, help="msg/s of each small tenant"
    )
    tenants.add_argument(
        "--small-delay",
        type=_duration_s,
        default=3.0,
        help="a small message is due this after sending",
    )
    tenants.add_argument(
        "--small-from",
        type=_duration_s,
        default=0.0,
        help="the small tenants start sending this long after the start (default 0)",
    )
    tenants.add_argument(
        "--no-tenant-header",
        action="store_true",
        help="send no chronosTenant header (the control run: the same load without tenants)",
    )
    mix.add_arguments(run, _duration_s)
    run.add_argument("--seed", type=int, help="random seed for uniform delays")
    run.add_argument(
        "--produce-only",
        action="store_true",
        help="send and flush, then stop: record no output (a background load for another run)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    run.add_argument("--out", type=Path, help="results directory (default loadtest/results/<ts>)")

    analyze = sub.add_parser("analyze", help="summarise a results directory with Spark")
    analyze.add_argument("results", type=Path, help="directory with sent.parquet, received.parquet")
    analyze.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    analyze.add_argument("--driver-memory", default="4g")
    analyze.add_argument("--out", type=Path, help="where to write summary.json and report.html")
    analyze.add_argument(
        "--timing-advance-ms", type=_non_negative_int, help="override the value in run.json"
    )
    analyze.add_argument(
        "--jitter-limit-ms", type=_non_negative_int, default=500, help="SLA bound (default 500)"
    )

    synth = sub.add_parser("synth", help="write synthetic events with known properties")
    synth.add_argument("out", type=Path)
    synth.add_argument("--count", type=_non_negative_int, default=1_000_000)
    synth.add_argument("--rate", type=_positive_float, default=10_000.0)
    synth.add_argument("--delay", type=_delay, default=parse_delay("uniform:3s-10s"))
    synth.add_argument("--lost-fraction", type=float, default=0.001)
    synth.add_argument("--duplicate-fraction", type=float, default=0.002)
    synth.add_argument("--dead-letter-fraction", type=float, default=0.0005)
    synth.add_argument("--early-fraction", type=float, default=0.001)
    synth.add_argument("--tail-fraction", type=float, default=0.001)
    synth.add_argument("--late-mean-ms", type=float, default=20.0)
    synth.add_argument("--timing-advance-ms", type=_non_negative_int, default=50)
    synth.add_argument("--seed", type=int, default=1)
    synth.add_argument("--no-expected", action="store_true", help="skip expected.json")

    relay = sub.add_parser(
        "relay", help="a stand-in for Chronos that echoes input to output at the deadline"
    )
    _add_kafka_options(relay)
    relay.add_argument("--timing-advance-ms", type=_non_negative_int, default=50)
    relay.add_argument("--start-from", choices=("end", "beginning"), default="end")

    from loadtest.bench import ceiling, driver
    from loadtest.soak import driver as soak_driver

    ceil = sub.add_parser(
        "ceiling", help="the ceiling: the node's store statements alone on a Postgres (no Kafka)"
    )
    ceiling.add_arguments(ceil)

    bench_parser = sub.add_parser(
        "bench",
        help="the headline benchmark: own stack, ceiling, scenarios, BENCHMARK.md",
        description="Bring up embedded Postgres and broker, measure the ceiling, run the "
        "scenarios against Chronos node processes, write bench.json and BENCHMARK.md.",
    )
    driver.add_arguments(bench_parser)
    soak = sub.add_parser(
        "soak",
        help="the soak: two nodes, an open-loop mix for an hour, sampled, analysed by Spark",
        description=soak_driver.DESCRIPTION,
    )
    soak_driver.add_arguments(soak)
    return parser


def _tenant_load(args: argparse.Namespace) -> TenantLoad | None:
    """The multi-tenant load of ``run``'s options, or None (an ordinary load)."""
    if not args.small_tenants and not args.flood_count:
        return None
    if args.count is not None:
        raise SystemExit("loadtest run: a multi-tenant load takes --duration, not --count")
    flood_at_ms = round(args.flood_at * 1000)
    tenants = TenantLoad(
        flood_count=args.flood_count,
        flood_rate=args.rate,
        flood_at_ms=flood_at_ms,
        small_tenants=args.small_tenants,
        small_rate=args.small_rate,
        small_delay_ms=round(args.small_delay * 1000),
        duration_s=60.0 if args.duration is None else args.duration,
        small_from_ms=round(args.small_from * 1000),
        header=not args.no_tenant_header,
    )
    if tenants.flood_send_s() * 1000 > flood_at_ms:
        print(
            f"warning: the flood is due at {flood_at_ms} ms, before its last send "
            f"(~{tenants.flood_send_s() * 1000:.0f} ms); late submissions are due immediately",
            file=sys.stderr,
        )
    return tenants


def _cmd_run(args: argparse.Namespace) -> int:
    from loadtest.harness.run import RunConfig, print_outcome, run_load

    duration: float | None = args.duration
    tenants = _tenant_load(args)
    if tenants is not None:
        count, duration = tenants.count, tenants.duration_s
    elif args.count is not None:
        count = args.count
        duration = None
    else:
        duration = 60.0 if duration is None else duration
        count = round(args.rate * duration)
    if isinstance(args.delay, BurstDelay) and tenants is None:
        span_ms = count / args.rate * 1000
        if args.delay.at_ms < span_ms:
            print(
                f"warning: burst at {args.delay.at_ms} ms is before the last send (~{span_ms:.0f} "
                "ms); late submissions are due immediately",
                file=sys.stderr,
            )
    out = args.out or DEFAULT_RESULTS / datetime.now().strftime("%Y%m%d-%H%M%S")
    cfg = RunConfig(
        bootstrap=args.bootstrap,
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        dead_letter_topic=args.dead_letter_topic or None,
        rate=args.rate,
        count=count,
        duration_s=duration,
        delay=args.delay,
        out_dir=out,
        payload_bytes=args.payload_bytes,
        keys=args.keys,
        drain_timeout_s=args.drain_timeout,
        grace_s=args.grace,
        timing_advance_ms=args.timing_advance_ms,
        behind_threshold_ms=args.behind_threshold_ms,
        start_from=args.start_from,
        create_topics=args.create_topics,
        seed=args.seed,
        progress=not args.no_progress,
        produce_only=args.produce_only,
        kafka_properties=dict(args.kafka_property),
        tenants=tenants,
        linger_ms=args.linger_ms,
        mix=mix.from_args(args),
    )
    result = run_load(cfg)
    print_outcome(result)
    print(result.out_dir)
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    from loadtest.analysis.sparkutil import spark_session
    from loadtest.analysis.summary import analyze_dir

    out = args.out or args.results
    spark = spark_session(args.master, driver_memory=args.driver_memory)
    try:
        summary = analyze_dir(
            spark,
            args.results,
            out,
            timing_advance_ms=args.timing_advance_ms,
            jitter_limit_ms=args.jitter_limit_ms,
        )
    finally:
        spark.stop()
    counts, late = summary["counts"], summary["lateness_ms"]
    after = summary["delivery"]["late_after_window"]
    print(
        f"sent {counts['sent']}, fired {counts['fired_distinct']}, lost {counts['lost']} "
        f"(never received), late after the window {after}, "
        f"duplicate ids {counts['duplicate_ids']}, dead-lettered {counts['dead_lettered']}; "
        f"lateness p50 {late['p50']} p99 {late['p99']} p99.9 {late['p99_9']} max {late['max']} ms; "
        f"analysed in {summary['analysis']['elapsed_s']} s",
        file=sys.stderr,
    )
    print(out / "report.html")
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from loadtest.analysis.synth import SynthSpec, write_synthetic

    spec = SynthSpec(
        count=args.count,
        rate=args.rate,
        delay=args.delay,
        lost_fraction=args.lost_fraction,
        duplicate_fraction=args.duplicate_fraction,
        dead_letter_fraction=args.dead_letter_fraction,
        early_fraction=args.early_fraction,
        tail_fraction=args.tail_fraction,
        late_mean_ms=args.late_mean_ms,
        timing_advance_ms=args.timing_advance_ms,
        seed=args.seed,
    )
    started = time.monotonic()
    write_synthetic(spec, args.out, expected=not args.no_expected)
    print(f"wrote {args.count} events in {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(args.out)
    return 0


def _cmd_relay(args: argparse.Namespace) -> int:
    from loadtest.harness.relay import EchoRelay

    relay = EchoRelay(
        bootstrap=args.bootstrap,
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        dead_letter_topic=args.dead_letter_topic or None,
        timing_advance_ms=args.timing_advance_ms,
        start_from=args.start_from,
        kafka_properties=dict(args.kafka_property),
    )
    relay.prepare()
    relay.start()
    signal.signal(signal.SIGTERM, lambda *_: relay.stop_event.set())
    print("relay running; Ctrl-C to stop", file=sys.stderr)
    try:
        while relay.is_alive():
            relay.join(0.5)
    except KeyboardInterrupt:
        pass
    relay.stop()
    print(f"relayed {relay.relayed}, dead-lettered {relay.dead_lettered}", file=sys.stderr)
    if relay.error is not None:
        print(f"relay failed: {relay.error}", file=sys.stderr)
        return 1
    return 0


def _cmd_ceiling(args: argparse.Namespace) -> int:
    from loadtest.bench import ceiling

    return ceiling.main(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    from loadtest.bench import driver

    return driver.main(args)


def _cmd_soak(args: argparse.Namespace) -> int:
    from loadtest.soak import driver

    return driver.main(args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    handlers = {
        "run": _cmd_run,
        "analyze": _cmd_analyze,
        "synth": _cmd_synth,
        "relay": _cmd_relay,
        "ceiling": _cmd_ceiling,
        "bench": _cmd_bench,
        "soak": _cmd_soak,
    }
    try:
        return handlers[args.command](args)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
