# syntax=docker/dockerfile:1
#
# Chronos node image.
#
#   docker build -t chronos:0.1.0 .
#   docker run --rm -e CHRONOS_DATABASE_URL=postgresql://... \
#     -e CHRONOS_KAFKA_BOOTSTRAP_SERVERS=kafka:9092 -p 8080:8080 chronos:0.1.0
#
# The entrypoint is the `chronos` CLI: the default command is `run` (one node); `migrate` applies
# the schema migrations. All configuration comes from CHRONOS_* environment variables at run time;
# nothing secret is baked into the image.
#
# The base image is a build argument: pin it by digest for reproducible builds, or name an internal
# mirror (both stages use it; it must provide `python` 3.11+ with venv, and groupadd/useradd):
#
#   docker build --build-arg BASE=python:3.11-slim@sha256:... -t chronos:0.1.0 .
#   buildah bud --format docker --build-arg BASE=registry.internal/python:3.11-slim -t chronos .
ARG BASE=python:3.11-slim

############################################################################
# builder: build the wheel and install it with its dependencies into a venv.
############################################################################
FROM ${BASE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# The venv lives at the same path in both stages, so its scripts' shebangs stay valid.
RUN python -m venv /opt/chronos

WORKDIR /src
# Only what the wheel is built from (pyproject names README.md; migrations are packaged into the
# wheel as chronos/_migrations).
COPY pyproject.toml README.md ./
COPY chronos ./chronos
COPY migrations ./migrations

# All dependencies ship binary wheels (confluent-kafka, psycopg[binary]), so no compiler is needed
# even here. Building the wheel first means the venv holds an ordinary install, not a link to /src.
# A node needs the `node` extra (the database stack); `--build-arg EXTRAS=node,msk` adds the AWS
# MSK IAM token signer (CHRONOS_KAFKA_OAUTH_PROVIDER=aws-msk-iam).
ARG EXTRAS=node
RUN /opt/chronos/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/chronos/bin/pip install --only-binary=:all: "$(ls /wheels/*.whl)[${EXTRAS}]" \
 && /opt/chronos/bin/chronos --help > /dev/null

############################################################################
# runtime: the slim base plus the venv, run as an unprivileged numeric user.
############################################################################
FROM ${BASE} AS runtime

LABEL org.opencontainers.image.title="chronos" \
      org.opencontainers.image.description="Chronos: a persistent time-delay scheduler for Kafka, backed by Postgres" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH="/opt/chronos/bin:${PATH}"

# Fixed numeric ids, so Kubernetes can verify runAsNonRoot (runAsUser: 10001).
RUN groupadd --system --gid 10001 chronos \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin chronos

COPY --from=builder /opt/chronos /opt/chronos

# Nothing is written at run time but to /tmp (mount an emptyDir there under a read-only root).
WORKDIR /tmp
USER 10001:10001

# Metrics, health and the admin API (CHRONOS_HTTP_PORT).
EXPOSE 8080

# Liveness of the node's loops. The slim image has no curl: Python's urllib does the request and
# exits non-zero on a refused connection, a timeout or a non-2xx answer.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/live' % os.environ.get('CHRONOS_HTTP_PORT', '8080'), timeout=4)"]

# SIGTERM starts the graceful drain (bounded by CHRONOS_SHUTDOWN_TIMEOUT_MS); keep the stop
# timeout (docker stop -t, terminationGracePeriodSeconds) above it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["chronos"]
CMD ["run"]
