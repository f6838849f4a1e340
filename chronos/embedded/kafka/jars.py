"""The jars of the embedded Apache Kafka: laid out once by Maven into a cache, reused offline.

``pom.xml`` beside this module (shipped in the package) pins the broker's version and the logging
binding its pom leaves out. The first start runs ``mvn dependency:copy-dependencies`` (Maven's
default repository) into ``$CHRONOS_DEV_KAFKA_CACHE`` or ``$XDG_CACHE_HOME/chronos`` (else
``~/.cache/chronos``), under ``kafka-<version>/``; a stamp holding the pom's digest marks a
complete layout, so an interrupted download is redone and a complete one is never touched
again (no Maven call, no network). The broker needs Java 17 or newer.

A missing tool is a :class:`ConfigError` naming what to install (``chronos dev`` exits 2).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path

from chronos.errors import ConfigError

log = logging.getLogger(__name__)

POM = Path(__file__).with_name("pom.xml")
CACHE_ENV = "CHRONOS_DEV_KAFKA_CACHE"
MIN_JAVA = 17
JAVA_PACKAGE = "openjdk-17-jre-headless"
MAVEN_PACKAGE = "maven"
_STAMP = ".complete"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def kafka_version(pom: Path = POM) -> str:
    """The Apache Kafka version ``pom`` pins (its ``kafka.version`` property)."""
    root = ElementTree.parse(pom).getroot()
    node = root.find("m:properties/m:kafka.version", _POM_NS)
    if node is None or not (node.text or "").strip():
        raise ConfigError(f"{pom} names no kafka.version property")
    return (node.text or "").strip()


def cache_root() -> Path:
    """Where laid-out jars live: ``$CHRONOS_DEV_KAFKA_CACHE``, else the user's cache dir."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "chronos").absolute()


def java_binary() -> str:
    """``java`` (``$JAVA_HOME/bin/java`` first), checked to be version 17 or newer."""
    home = os.environ.get("JAVA_HOME", "").strip()
    candidate = str(Path(home) / "bin" / "java") if home else None
    if candidate is None or not os.access(candidate, os.X_OK):
        candidate = shutil.which("java")
    if candidate is None:
        raise ConfigError(
            f"the embedded Apache Kafka needs Java {MIN_JAVA} or newer: "
            f"apt-get install {JAVA_PACKAGE} (or set JAVA_HOME)"
        )
    major = parse_java_major(_java_version(candidate))
    if major < MIN_JAVA:
        raise ConfigError(
            f"the embedded Apache Kafka needs Java {MIN_JAVA} or newer, {candidate} is "
            f"Java {major}: apt-get install {JAVA_PACKAGE} (or set JAVA_HOME)"
        )
    return candidate


@functools.cache
def _java_version(java: str) -> str:
    """``java -version``'s output."""
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"cannot run {java} -version: {exc}") from exc
    return result.stderr + result.stdout


def class_archive(libs: Path, java: str, kind: str = "") -> Path:
    """Where the broker's class-data-sharing archive for ``java`` lives, beside the jars: made
    at the exit of the first node that runs without one, it halves the next starts' time. A
    ``kind`` of node that loads other classes (``secured``: TLS, SASL, the authorizer) has an
    archive of its own."""
    tag = hashlib.sha256(f"{java}\n{_java_version(java)}".encode()).hexdigest()[:12]
    return libs.parent / f"classes-{tag}{'-' + kind if kind else ''}.jsa"


def parse_java_major(text: str) -> int:
    """The major version in ``java -version`` output (``"1.8.0_372"`` is 8); 0 if none."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        return 0
    first = int(match.group(1))
    return int(match.group(2) or 0) if first == 1 else first


def jar_dir(pom: Path = POM, root: Path | None = None) -> Path:
    """The directory holding the broker's jars, laid out by Maven first if needed."""
    target = (root or cache_root()) / f"kafka-{kafka_version(pom)}"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    libs = target / "libs"
    if _complete(target, digest):
        return libs
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".lock"):
        if _complete(target, digest):  # another process finished it while we waited
            return libs
        _lay_out(pom, target, libs, digest)
    return libs


def classpath(pom: Path = POM, root: Path | None = None) -> str:
    """The broker's class path (every jar of :func:`jar_dir`)."""
    return str(jar_dir(pom, root) / "*")


def _complete(target: Path, digest: str) -> bool:
    try:
        return (target / _STAMP).read_text().strip() == digest
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lay_out(pom: Path, target: Path, libs: Path, digest: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(
            f"the embedded Apache Kafka's jars are not in {target} yet and laying them out "
            f"needs Maven: apt-get install {MAVEN_PACKAGE}"
        )
    (target / _STAMP).unlink(missing_ok=True)
    staging = target / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(pom, target / "pom.xml")
    log.info(
        "laying out the Apache Kafka %s jars into %s with Maven (once)",
        kafka_version(pom),
        target,
        extra={"event": "dev_kafka_jars"},
    )
    command = [
        mvn, "-q", "-B", "-f", str(target / "pom.xml"),
        "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
    ]  # fmt: skip
    maven_log = target / "mvn.log"
    with maven_log.open("wb") as out:
        code = subprocess.run(
            command, cwd=target, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            check=False,
        ).returncode  # fmt: skip
    if code != 0 or not any(staging.glob("kafka_2.13-*.jar")):
        tail = "\n".join(maven_log.read_text(errors="replace").splitlines()[-15:])
        raise ConfigError(
            f"Maven could not lay out the Apache Kafka jars (exit {code}; log {maven_log}):\n{tail}"
        )
    shutil.rmtree(libs, ignore_errors=True)
    for archive in target.glob("classes-*.jsa"):  # made from the old jars: of no use now
        archive.unlink(missing_ok=True)
    staging.rename(libs)
    (target / _STAMP).write_text(digest + "\n")
