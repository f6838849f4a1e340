"""Laying out the embedded Apache Kafka's jars: Maven once, then the cache, offline."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from chronos.config import settings
from chronos.embedded import dev
from chronos.embedded.kafka import config as kafka_config
from chronos.embedded.kafka import jars as kafka_jars
from chronos.errors import ConfigError

FAKE_MVN = """#!{python}
# Records each call, then lays out two jars where -DoutputDirectory= says.
import pathlib, sys
with open({calls!r}, "a") as calls:
    calls.write(" ".join(sys.argv[1:]) + "\\n")
if {fail!r}:
    sys.exit(1)
out = pathlib.Path(next(a for a in sys.argv if a.startswith("-DoutputDirectory="))[18:])
out.mkdir(parents=True)
for name in ("kafka_2.13-9.9.9.jar", "kafka-clients-9.9.9.jar"):
    (out / name).touch()
"""


def _fake_mvn(bin_dir: Path, calls: Path, *, fail: bool = False) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "mvn"
    script.write_text(FAKE_MVN.format(python=sys.executable, calls=str(calls), fail=fail))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_shipped_pom_pins_a_kafka_4_version() -> None:
    assert kafka_jars.POM.exists()
    major = int(kafka_jars.kafka_version().split(".")[0])
    assert major >= 4
    text = kafka_jars.POM.read_text()
    assert "log4j-slf4j2-impl" in text and "<url>" not in text  # Maven's default repository


def test_maven_runs_once_then_the_cache_is_used_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    _fake_mvn(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv(kafka_jars.CACHE_ENV, str(tmp_path / "cache"))

    libs = kafka_jars.jar_dir()

    version = kafka_jars.kafka_version()
    assert libs == tmp_path / "cache" / f"kafka-{version}" / "libs"
    assert (libs / "kafka_2.13-9.9.9.jar").exists() and _calls(calls) == 1
    assert kafka_jars.jar_dir() == libs
    assert _calls(calls) == 1  # the stamp is there: no Maven, no network
    assert kafka_jars.classpath() == f"{libs}/*"


def test_an_unfinished_layout_is_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    _fake_mvn(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    root = tmp_path / "cache"
    target = root / f"kafka-{kafka_jars.kafka_version()}"
    (target / "libs").mkdir(parents=True)  # a download that was interrupted: no stamp
    (target / "libs" / "half.jar").touch()
    (target / "classes-0123456789ab.jsa").touch()  # a class archive of the old jars

    libs = kafka_jars.jar_dir(root=root)

    assert _calls(calls) == 1
    assert not list(target.glob("*.jsa"))
    assert sorted(p.name for p in libs.iterdir()) == [
        "kafka-clients-9.9.9.jar",
        "kafka_2.13-9.9.9.jar",
    ]


def test_a_changed_pom_lays_out_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    _fake_mvn(tmp_path / "bin", calls)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    pom = tmp_path / "pom.xml"
    pom.write_text(kafka_jars.POM.read_text())
    kafka_jars.jar_dir(pom, tmp_path / "cache")
    pom.write_text(pom.read_text().replace("</project>", "<!-- changed --></project>"))

    kafka_jars.jar_dir(pom, tmp_path / "cache")

    assert _calls(calls) == 2


def test_a_failed_maven_run_names_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_mvn(tmp_path / "bin", tmp_path / "calls", fail=True)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))

    with pytest.raises(ConfigError, match=r"Maven could not lay out .*mvn\.log"):
        kafka_jars.jar_dir(root=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/.complete"))


def test_no_maven_and_no_cache_names_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(ConfigError, match="needs Maven: apt-get install maven"):
        kafka_jars.jar_dir(root=tmp_path / "cache")


def test_the_cache_defaults_to_the_users_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kafka_jars.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    assert kafka_jars.cache_root() == Path("/somewhere/cache/chronos")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert kafka_jars.cache_root() == Path.home() / ".cache" / "chronos"


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_372"', 8),
        ("nothing useful", 0),
    ],
)
def test_java_versions_are_read(text: str, major: int) -> None:
    assert kafka_jars.parse_java_major(text) == major


def test_no_java_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)

    with pytest.raises(ConfigError, match="Java 17 or newer: apt-get install openjdk-17"):
        kafka_jars.java_binary()


def test_an_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))

    with pytest.raises(ConfigError, match=r"is Java 11: apt-get install openjdk-17"):
        kafka_jars.java_binary()


def _dev_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    dev.add_dev_arguments(parser)
    settings.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_chronos_dev_without_java_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [k for k in os.environ if k.startswith("CHRONOS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)

    code = dev.run_dev(_dev_args("--data-dir", str(tmp_path / "dev")))

    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "apt-get install openjdk-17-jre-headless" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--brokers", "0"], "--brokers"),
        (["--brokers", "3", "--broker", "tansu"], "--broker kafka"),
        (["--brokers", "3", "--tls"], "--tls"),
        (["--broker", "tansu", "--tls"], "--tls needs --broker kafka"),
    ],
)
def test_chronos_dev_refuses_broker_options_that_do_not_fit(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert dev.run_dev(_dev_args(*argv)) == 2
    assert named in capsys.readouterr().err


def test_the_broker_settings_suit_a_small_machine(tmp_path: Path) -> None:
    node = kafka_config.NodeConfig(1, "127.0.0.1", 9092, 9093, tmp_path)
    props = node.properties()

    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["auto.create.topics.enable"] == "false"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["offsets.topic.num.partitions"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    # A dead broker is fenced at Kafka's defaults (9 s, heartbeats every 2 s), as users' clusters
    # do: `chronos dev --brokers 3` and the suite show what a broker's death costs there.
    assert "broker.session.timeout.ms" not in props
    assert "broker.heartbeat.interval.ms" not in props
    assert props["log.dirs"] == str(tmp_path / "data")
    assert any(o.startswith("-Xmx") for o in kafka_config.JVM_OPTIONS)


def test_three_nodes_share_one_quorum_and_replicate_internal_topics(tmp_path: Path) -> None:
    voters = ((1, 9101), (2, 9102), (3, 9103))
    node = kafka_config.NodeConfig(
        2, "127.0.0.1", 9093, 9102, tmp_path, voters=voters, replication=3
    )
    props = node.properties()

    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    )
    assert props["node.id"] == "2"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"


def test_cluster_ids_look_like_kafkas() -> None:
    ids = {kafka_config.new_cluster_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_a_secured_node_has_a_class_archive_of_its_own(tmp_path: Path) -> None:
    java = shutil.which("java") or "java"
    plain = kafka_jars.class_archive(tmp_path / "libs", java)
    secured = kafka_jars.class_archive(tmp_path / "libs", java, "secured")
    assert plain != secured and secured.name.endswith("-secured.jsa")
    assert plain.parent == secured.parent == tmp_path
