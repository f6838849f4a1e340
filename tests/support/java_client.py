"""The official Java client on both sides of Chronos: ``java/JavaClient.java`` compiled with
``javac`` against ``kafka-clients`` from the embedded broker's jars (laid out by Maven with the
broker's, so nothing more is downloaded), run as a subprocess.

Records cross as text, one a line: tab-separated key, value and header name/value pairs, each
base64 or ``-`` for null (see the Java source).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from chronos.embedded.kafka import jars as kafka_jars
from tests.support.services import unavailable

SOURCE = Path(__file__).with_name("java") / "JavaClient.java"
MAIN = "JavaClient"
JDK_PACKAGE = "openjdk-17-jdk-headless"
# What the Java client needs of the broker's jars: the client and its logging facade (no
# binding: its log is silent), and the codecs should a batch come compressed.
_JARS = ("kafka-clients-*.jar", "slf4j-api-*.jar", "lz4-java-*.jar", "snappy-java-*.jar",
         "zstd-jni-*.jar")  # fmt: skip

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class JavaRecord:
    key: bytes | None
    value: bytes | None
    headers: Headers


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    timestamp_ms: int
    record: JavaRecord


class JavaClient:
    """The compiled client: ``produce`` and ``consume`` as the Java producer and consumer do."""

    def __init__(self, classes: Path, jars: list[Path], java: str) -> None:
        self._classpath = ":".join([str(classes), *map(str, jars)])
        self._java = java

    @classmethod
    def compile(cls, into: Path) -> JavaClient:
        """Compile the client into ``into``; unavailable (skip, or fail in CI) without a JDK."""
        javac = shutil.which("javac")
        if javac is None:
            unavailable(f"the Java client test needs javac: apt-get install {JDK_PACKAGE}")
        java = kafka_jars.java_binary()
        libs = kafka_jars.jar_dir()
        jars = [jar for pattern in _JARS for jar in sorted(libs.glob(pattern))]
        assert any(j.name.startswith("kafka-clients-") for j in jars), f"no kafka-clients in {libs}"
        classpath = ":".join(map(str, jars))
        subprocess.run(
            [javac, "-d", str(into), "-cp", classpath, str(SOURCE)],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        return cls(into, jars, java)

    def produce(self, bootstrap: str, topic: str, records: list[JavaRecord]) -> list[int]:
        """Produce ``records`` with the Java producer's defaults; the partition of each."""
        lines = "".join(_encode(r) + "\n" for r in records)
        out = self._run(["produce", bootstrap, topic], lines, timeout=60)
        partitions = [int(line.split("\t")[0]) for line in out.splitlines()]
        assert len(partitions) == len(records), out
        return partitions

    def consume(self, bootstrap: str, topic: str, count: int, seconds: int = 30) -> list[Consumed]:
        """Every record of ``topic`` from the beginning, as the Java consumer reads them: until
        ``count`` and a second more (a duplicate would show), or ``seconds``."""
        out = self._run(["consume", bootstrap, topic, str(count), str(seconds)], "", seconds + 30)
        consumed = []
        for line in out.splitlines():
            partition, offset, timestamp, rest = line.split("\t", 3)
            consumed.append(Consumed(int(partition), int(offset), int(timestamp), _decode(rest)))
        return consumed

    def _run(self, args: list[str], stdin: str, timeout: float) -> str:
        result = subprocess.run(
            [self._java, "-cp", self._classpath, MAIN, *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"the Java client failed: {result.stderr[-2000:]}"
        return result.stdout


def _field(data: bytes | None) -> str:
    return "-" if data is None else base64.b64encode(data).decode("ascii")


def _unfield(text: str) -> bytes | None:
    return None if text == "-" else base64.b64decode(text)


def _encode(record: JavaRecord) -> str:
    fields = [_field(record.key), _field(record.value)]
    for name, value in record.headers:
        fields += [_field(name.encode()), _field(value)]
    return "\t".join(fields)


def _decode(line: str) -> JavaRecord:
    fields = line.split("\t")
    pairs = fields[2:]
    headers: Headers = []
    for i in range(0, len(pairs), 2):
        name = _unfield(pairs[i])
        assert name is not None, line
        headers.append((name.decode(), _unfield(pairs[i + 1])))
    return JavaRecord(_unfield(fields[0]), _unfield(fields[1]), headers)
