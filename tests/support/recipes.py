"""The producer recipes of ``docs/recipes/`` (docs/recipes.md shows their source), each built
with its language's toolchain and run as a subprocess: ``build(language, work)`` then
``recipe.run(bootstrap, input_topic, prefix)``.

- Java: ``javac`` against the embedded broker's ``kafka-clients`` jars (nothing downloaded).
- Go: ``go build`` with the committed go.mod/go.sum (``-mod=readonly``: a stale go.sum fails),
  modules and build cache under ``<cache>/recipes/go``; the first build downloads franz-go through
  the module proxy.
- Node.js: ``npm ci`` of the committed package-lock.json into the work directory, npm's cache
  under ``<cache>/recipes/npm``; the first one downloads kafkajs.
- Python: the interpreter running the suite (``chronos.client``, confluent-kafka).

``<cache>`` is the embedded broker's (``chronos.embedded.kafka.jars.cache_root()``). A missing
toolchain is ``unavailable()``: a skip locally, a failure in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from chronos.embedded.kafka import jars as kafka_jars
from tests.support.services import unavailable

RECIPES = Path(__file__).resolve().parents[2] / "docs" / "recipes"
LANGUAGES = ("java", "go", "node", "python")
# Debian packages of each toolchain (the Makefile's system-deps installs them when missing).
PACKAGES = {"javac": "openjdk-17-jdk-headless", "go": "golang-go", "node": "nodejs", "npm": "npm"}
JAVA_MAIN = "ChronosRecipe"
# What the recipe needs of the broker's jars: the client and its logging facade (no binding: a
# silent log), and the codecs should a producer be configured to compress.
_JARS = ("kafka-clients-*.jar", "slf4j-api-*.jar", "lz4-java-*.jar", "snappy-java-*.jar",
         "zstd-jni-*.jar")  # fmt: skip
# the lock file as committed, no install scripts, quiet
NPM_CI_FLAGS = (
    "--prefer-offline",
    "--ignore-scripts",
    "--no-audit",
    "--no-fund",
    "--loglevel=error",
)
BUILD_TIMEOUT = 280.0  # a cold Go build compiles the standard library and franz-go
RUN_TIMEOUT = 60.0


@dataclass(frozen=True)
class Recipe:
    """A built recipe: ``command`` plus its three arguments, in ``cwd``."""

    language: str
    command: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def run(self, bootstrap: str, topic: str, prefix: str) -> str:
        """Run it to the end; its standard output. Fails the test on a non-zero exit."""
        return _run([*self.command, bootstrap, topic, prefix], self.cwd, self.env, RUN_TIMEOUT)


def build(language: str, work: Path) -> Recipe:
    """Build the recipe of ``language`` in ``work`` (a fresh directory)."""
    builders = {"java": _java, "go": _go, "node": _node, "python": _python}
    return builders[language](work)


def cache_dir() -> Path:
    return kafka_jars.cache_root() / "recipes"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        unavailable(f"the {name} recipe test needs {name}: apt-get install {PACKAGES[name]}")
    return path


def _run(command: list[str], cwd: Path, env: Mapping[str, str], timeout: float) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"{' '.join(command[:3])}… exited {result.returncode}:\n"
        f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


def _java(work: Path) -> Recipe:
    javac = _tool("javac")
    java = kafka_jars.java_binary()
    libs = kafka_jars.jar_dir()
    jars = [str(jar) for pattern in _JARS for jar in sorted(libs.glob(pattern))]
    assert any(Path(j).name.startswith("kafka-clients-") for j in jars), f"no client in {libs}"
    source = RECIPES / "java" / f"{JAVA_MAIN}.java"
    classpath = ":".join(jars)
    _run([javac, "-d", str(work), "-cp", classpath, str(source)],
         work, os.environ, BUILD_TIMEOUT)  # fmt: skip
    return Recipe("java", (java, "-cp", f"{work}:{classpath}", JAVA_MAIN), work)


def _go(work: Path) -> Recipe:
    go = _tool("go")
    cache = cache_dir() / "go"
    env = {
        **os.environ,
        "GOPATH": str(cache / "path"),
        "GOMODCACHE": str(cache / "path" / "pkg" / "mod"),
        "GOCACHE": str(cache / "build"),
        "GOFLAGS": "-mod=readonly",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }
    binary = work / "recipe"
    _run([go, "build", "-o", str(binary), "."], RECIPES / "go", env, BUILD_TIMEOUT)
    return Recipe("go", (str(binary),), work)


def _node(work: Path) -> Recipe:
    node, npm = _tool("node"), _tool("npm")
    for name in ("package.json", "package-lock.json", "recipe.js"):
        shutil.copy(RECIPES / "node" / name, work / name)
    cache = str(cache_dir() / "npm")
    _run([npm, "ci", "--cache", cache, *NPM_CI_FLAGS], work, os.environ, BUILD_TIMEOUT)
    return Recipe("node", (node, "recipe.js"), work)


def _python(work: Path) -> Recipe:
    return Recipe("python", (sys.executable, str(RECIPES / "python" / "recipe.py")), work)
