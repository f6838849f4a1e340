"""The container image, built from the Dockerfile and run: no Docker engine, no registry.

The base is Debian 12 made from Debian's own packages (``debootstrap --variant=minbase`` with
python3, venv, ``python`` and passwd), imported into the containers storage and handed to the
Dockerfile as ``--build-arg BASE=...``, the same way a user names a pinned digest or a mirror.
Made once per machine: its root file system is kept as a tarball under
``~/.cache/chronos/image-base/`` keyed by the package list (debootstrap takes a cold run about
three minutes; later runs find the image, or import the tarball in seconds, and only the
Chronos image is built again, in under a minute).
``buildah bud`` then builds the Chronos image (pip reaches PyPI), and podman runs it as the
image's own user (10001) against the session's Postgres and broker over the host's network:
``chronos migrate``, then ``chronos run`` on a read-only root with a tmpfs at /tmp, which fires a
message scheduled with ``chronos.client``; the image's HEALTHCHECK passes on the live node and
fails without one; SIGTERM drains it to exit 0; and on a writable root the node leaves nothing
behind that a container running nothing would not (``podman diff``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer

from chronos import client
from chronos.embedded.kafka import jars as kafka_jars
from tests.e2e.test_cli_e2e import node_env
from tests.support import Topics
from tests.support.databases import DatabaseFactory
from tests.support.kafka import consume
from tests.support.polling import eventually
from tests.support.services import unavailable

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.slow,
    # Not ``exclusive``: its build (pip in a chroot, then the layers' commit) loads the machine
    # as the benchmark's smoke run does, which the fault scenarios share it with; holding the
    # other worker for it cost the suite the whole build on the wall clock.
    pytest.mark.timeout(1800),
]

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("podman", "buildah", "runc", "debootstrap")
DEBIAN_PACKAGES = "podman buildah runc debootstrap"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("CHRONOS_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What the Dockerfile runs in its base: `python -m venv` (with pip), groupadd/useradd; the CA
# certificates for pip's HTTPS.
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates", "passwd")
# Package caches and indexes: 90 MB the image never reads.
TRIMMED = ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*")

# runc and cgroupfs work on hybrid cgroups (crun does not); explicit ulimits, since a container
# may not raise its own without CAP_SYS_RESOURCE.
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs"]
RUN_FLAGS = ["--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
# A read-only root with nothing writable but /tmp (podman's default read-only mode would also
# mount tmpfs at /run and /var/tmp).
READ_ONLY = ["--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp"]
WRITABLE = ["--tmpfs", "/tmp"]
UID = "10001"


def _run(
    argv: list[str], timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert result.returncode == 0, f"{argv}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


# ------------------------------------------------------------------------------- the base


def base_key() -> str:
    recipe = {"suite": DEBIAN_SUITE, "variant": "minbase", "packages": sorted(BASE_PACKAGES),
              "trimmed": TRIMMED}  # fmt: skip
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def debian_base(cache: Path) -> str:
    """The base image's name in the containers storage: imported from the cached root file
    system, which debootstrap makes first when missing. One run at a time does so (a lock)."""
    key = base_key()
    image = f"localhost/chronos-test-base:{key}"
    archive = cache / f"debian-{DEBIAN_SUITE}-{key}.tar"
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _run([*PODMAN, "image", "exists", image], check=False).returncode == 0:
            return image
        if not archive.exists():
            _debootstrap(archive)
        _run([*PODMAN, "import", str(archive), image], timeout=300)
    return image


def _debootstrap(archive: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=archive.parent))
    rootfs = work / "rootfs"
    try:
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
              DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR], timeout=1500)  # fmt: skip
        for pattern in TRIMMED:
            for path in rootfs.glob(pattern):
                if not path.is_dir():
                    path.unlink()
        partial = work / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."], timeout=300)
        partial.rename(archive)
    finally:
        _remove_rootfs(work)


def _mounts_under(work: Path) -> list[str]:
    lines = Path("/proc/self/mounts").read_text().splitlines()
    return sorted((m for m in (line.split()[1] for line in lines) if m.startswith(f"{work}/")),
                  reverse=True)  # fmt: skip


def _remove_rootfs(work: Path) -> None:
    """A failed debootstrap may leave /proc, /sys or the host's /dev mounted in the tree: never
    delete through a mount."""
    for mount in _mounts_under(work):
        subprocess.run(["umount", "--lazy", mount], check=False, timeout=60)
    still = _mounts_under(work)
    assert not still, f"left {work} in place: {still} still mounted"
    shutil.rmtree(work)


# ------------------------------------------------------------------------------- the image


def _trust_store() -> list[str]:
    """The host's CA bundle over the base's for the build's RUN steps only (not committed), so
    pip trusts what the host trusts: a TLS-intercepting proxy between the machine and PyPI."""
    bundle = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
    return (
        ["--volume", f"{bundle}:/etc/ssl/certs/ca-certificates.crt:ro"] if bundle.is_file() else []
    )


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        unavailable(
            f"the image test needs {', '.join(missing)} (apt-get install {DEBIAN_PACKAGES})"
        )
    if os.geteuid() != 0:
        unavailable("the image test needs root (debootstrap; podman's system storage)")
    base = debian_base(kafka_jars.cache_root() / "image-base")
    tag = f"localhost/chronos-test:{uuid.uuid4().hex[:12]}"
    # --format docker: the OCI image format has no HEALTHCHECK.
    _run(["buildah", "bud", "--isolation", "chroot", "--network", "host", "--format", "docker",
          *_trust_store(), "--build-arg", f"BASE={base}", "--tag", tag,
          "--file", str(REPO_ROOT / "Dockerfile"), str(REPO_ROOT)], timeout=1200)  # fmt: skip
    yield tag
    _run([*PODMAN, "rmi", "--force", tag], check=False)


@contextmanager
def container(
    image: str,
    root: list[str],
    *args: str,
    env: dict[str, str] | None = None,
    entrypoint: str | None = None,
) -> Iterator[str]:
    """A detached container of ``image`` running its entrypoint (or ``entrypoint``) with
    ``args``, on the ``root`` flags; removed afterwards."""
    name = f"chronos-test-{uuid.uuid4().hex[:12]}"
    flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
    if entrypoint is not None:
        flags.append(f"--entrypoint={entrypoint}")
    _run([*PODMAN, "run", "--detach", "--name", name, *RUN_FLAGS, *root, *flags, image, *args])
    try:
        yield name
    finally:
        _run([*PODMAN, "rm", "--force", "--time", "0", name], check=False)


def logs(name: str) -> str:
    result = _run([*PODMAN, "logs", "--tail", "60", name], check=False)
    return result.stdout + result.stderr


def healthy(name: str) -> bool:
    """The image's HEALTHCHECK, run by podman in the container."""
    return _run([*PODMAN, "healthcheck", "run", name], check=False).returncode == 0


def changes(name: str) -> dict[str, list[str]]:
    """What the container changed in the image's file system (its writable layer)."""
    result = _run([*PODMAN, "diff", "--format", "json", name])
    return json.loads(result.stdout or "{}")  # type: ignore[no-any-return]


def wait_exit(name: str) -> int:
    return int(_run([*PODMAN, "wait", name], timeout=60).stdout.strip())


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------------------------- the test


def run_a_node(
    image: str, sandbox: list[str], database_url: str, bootstrap: str, topics: Topics
) -> None:
    """``chronos migrate``, then a node that fires a scheduled message, its HEALTHCHECK passing,
    as uid 10001; SIGTERM drains it to exit 0; its layer holds no more than podman's own."""
    env = {**node_env(database_url, bootstrap, topics), "CHRONOS_HTTP_PORT": str(free_port())}
    with container(image, sandbox, "migrate", env=env) as migrate:
        assert wait_exit(migrate) == 0, logs(migrate)

    # What podman itself puts into a container's layer (/etc/mtab, /run/.containerenv...).
    with container(image, sandbox, "--version") as idle:
        assert wait_exit(idle) == 0, logs(idle)
        baseline = changes(idle)

    with container(image, sandbox, env=env) as node:
        assert eventually(lambda: healthy(node), timeout=90, every=1), logs(node)
        assert _run([*PODMAN, "exec", node, "id", "-u"]).stdout.strip() == UID

        failures: list[object] = []

        def delivered(error: object, _message: object) -> None:
            if error is not None:
                failures.append(error)

        producer = Producer({"bootstrap.servers": bootstrap})
        key = f"from-the-image-{uuid.uuid4().hex[:8]}"
        client.schedule(
            producer, key=key, value="fired", delay=2, topic=topics.input, on_delivery=delivered
        )
        assert producer.flush(30) == 0 and not failures, failures
        fired = consume(bootstrap, topics.output, 1, timeout=60)
        assert fired, logs(node)
        assert (fired[0].key(), fired[0].value()) == (key.encode(), b"fired")
        assert healthy(node)

        _run([*PODMAN, "stop", "--time", "30", node], timeout=60)
        assert wait_exit(node) == 0, logs(node)
        assert changes(node) == baseline


def test_the_image_runs_a_node_read_only_as_its_own_user(
    image: str,
    database_factory: DatabaseFactory,
    kafka_bootstrap: str,
    make_topics: Callable[..., Topics],
) -> None:
    """One test, so that one worker builds the image (pytest-xdist's ``xdist_group`` is not
    honoured under pytest 9: tests of one module may land on both workers)."""
    with container(image, READ_ONLY, "120", entrypoint="sleep") as idle:
        assert not healthy(idle), "the HEALTHCHECK passes without a node"

    # Read-only as production runs it (writing anywhere but /tmp fails); then on a writable root,
    # where `podman diff` would show anything the node wrote outside /tmp.
    for sandbox in (READ_ONLY, WRITABLE):
        database_url = database_factory.create()
        try:
            run_a_node(image, sandbox, database_url, kafka_bootstrap, make_topics())
        finally:
            database_factory.drop(database_url)
