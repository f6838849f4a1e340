"""What a user installs, built and run outside the checkout: ``python -m build`` makes the sdist
and the wheel; the wheel holds every file of the package (the named SQL, the migrations, the
broker's pom, the console, the OpenAPI and audit schemas); installed into a clean virtualenv
with the locked run dependencies alone, its ``chronos dev`` starts from a directory outside the
checkout and fires a message that its ``chronos schedule`` sent and its ``chronos tail`` reads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from tests.e2e.test_dev_stack import chronos_dev

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHRONOS_", "PYTHON"))}
    result = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{argv}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built as a release would build them (an isolated build env)."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out, REPO_ROOT,
         cwd=out)  # fmt: skip
    return out


def _tracked(prefix: str) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", prefix], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return [line for line in listed.stdout.splitlines() if line]


def test_the_wheel_holds_every_file_of_the_package_and_the_migrations(dist: Path) -> None:
    (wheel,) = dist.glob("chronos_scheduler-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = _tracked("chronos")
    assert any(n.endswith(".sql") for n in package) and any(n.endswith("pom.xml") for n in package)
    missing = [n for n in package if n not in names]
    migrations = [
        n.replace("migrations/", "chronos/_migrations/", 1) for n in _tracked("migrations")
    ]
    missing += [n for n in migrations if n not in names]
    assert missing == [], missing
    assert not any(n.startswith(("tests/", "loadtest/")) for n in names)


def test_the_sdist_builds_the_same_package(dist: Path) -> None:
    (sdist,) = dist.glob("chronos_scheduler-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    wanted = [
        "pyproject.toml",
        "README.md",
        "LICENSE",
        *_tracked("chronos"),
        *_tracked("migrations"),
    ]
    assert [n for n in wanted if n not in names] == []


def test_the_installed_wheel_runs_chronos_dev_and_fires(dist: Path) -> None:
    (wheel,) = dist.glob("chronos_scheduler-*.whl")
    # Outside the checkout (no `chronos` to import there), and below /tmp: as root, `chronos dev`
    # runs Postgres as a system user, who must reach the venv's Postgres binaries.
    home = Path(tempfile.mkdtemp(prefix="chronos-user-"))
    home.chmod(0o755)
    venv = home / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=home)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "--quiet", "-r", REPO_ROOT / "requirements/run.lock",
         cwd=home)  # fmt: skip
    _run(python, "-m", "pip", "install", "--quiet", "--no-deps", wheel, cwd=home)
    where = _run(python, "-c", "import chronos; print(chronos.__file__)", cwd=home).stdout
    assert str(venv) in where and str(REPO_ROOT) not in where, where
    chronos = venv / "bin" / "chronos"
    with chronos_dev("--nodes", "1", python=str(python), cwd=home) as dev:
        bootstrap = dev.value("Kafka bootstrap")
        _run(chronos, "schedule", "--in", "2", "--key", "from-the-wheel", "--value", "fired",
             "--kafka-bootstrap-servers", bootstrap, cwd=home)  # fmt: skip
        tailed = _run(chronos, "tail", "--from-beginning", "--max", "1",
                      "--kafka-bootstrap-servers", bootstrap, cwd=home, timeout=120)  # fmt: skip
        assert "from-the-wheel" in tailed.stdout and "fired" in tailed.stdout, tailed.stdout
    assert dev.process.returncode == 0, "".join(dev.lines[-40:])
    shutil.rmtree(home, ignore_errors=True)
