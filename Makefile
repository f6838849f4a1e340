# Chronos: the two commands of the README.
#   make dev    bring the whole system up on embedded defaults (Postgres, Apache Kafka, 2 nodes)
#   make test   lint, import layers, format check, strict typing, docs build, then the full suite (CI)
# Both create ./.venv and install what they need into it, at the versions of the lock files:
# requirements/run.lock (the package and the embedded servers: all `make dev` needs) and
# requirements/dev.lock (everything the tests, the benchmark and CI use). `make lock` renews both.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: system-deps kafka-deps kafka-jars dev test test-long unit check lint format-check typecheck docs install lock clean reliability bench soak

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): requirements/run.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements/run.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

$(DEV_STAMP): requirements/dev.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -r requirements/dev.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

install: $(DEV_STAMP)

dev: $(RUN_STAMP) kafka-deps
	$(BIN)/chronos dev $(ARGS)

# The full suite (unit, integration, e2e, migration, deploy, load-test and fault tiers), after
# the static checks. CI (.ci/run) runs exactly this.
test: check system-deps kafka-jars
	$(BIN)/python -m pytest -n 2 --dist loadgroup $(ARGS)

# Debian binaries the suite runs: promtool (the alert rules' tests), headless Chromium with its
# driver (the console's browser test), a PostgreSQL server built with OpenSSL (the embedded one
# has none: the TLS tests; the broker serves TLS on its own listener) and the Java compiler (the
# Java client test builds its producer and consumer against the broker's jars), and podman,
# buildah, runc and debootstrap (the image test builds a Debian base and the Dockerfile's image,
# and runs it: tests/deploy/test_image.py); and the embedded broker's Java and Maven
# (kafka-deps). Installed when missing and we are root; otherwise, or if one is still missing
# after the install, `make test` stops at once naming them (the suite would fail on them: no
# test skips silently in CI).
SYSTEM_BINARIES := promtool chromium chromedriver javac podman buildah runc debootstrap java mvn
SYSTEM_PACKAGES := prometheus chromium chromium-driver postgresql-15 openjdk-17-jdk-headless \
                   podman buildah runc debootstrap maven
# The producer recipes' toolchains (docs/recipes.md, tests/integration/test_recipes.py), as
# binary:package, only the missing ones installed: a Node.js from elsewhere (NodeSource) brings
# its own npm and conflicts with Debian's. Debian 12's Go is 1.19, which the Go recipe's go.mod
# allows.
RECIPE_TOOLS := go:golang-go node:nodejs npm:npm
system-deps: kafka-deps
	@missing=""; for b in $(SYSTEM_BINARIES); do command -v $$b >/dev/null || missing="$$missing $$b"; done; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgres(Debian)"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages for:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(SYSTEM_PACKAGES) \
	      || { echo "could not install $(SYSTEM_PACKAGES): the suite needs them" >&2; exit 1; }; \
	  else \
	    echo "missing:$$missing: the suite needs them (as root: apt-get install $(SYSTEM_PACKAGES))" >&2; \
	    exit 1; \
	  fi; \
	fi; \
	missing=""; for b in $(SYSTEM_BINARIES); do command -v $$b >/dev/null || missing="$$missing $$b"; done; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgres(Debian)"; \
	if [ -n "$$missing" ]; then echo "still missing after the install:$$missing" >&2; exit 1; fi
	@missing=""; packages=""; for t in $(RECIPE_TOOLS); do command -v $${t%%:*} >/dev/null || \
	  { missing="$$missing $${t%%:*}"; packages="$$packages $${t#*:}"; }; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages for:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$packages \
	      || { echo "could not install$$packages: the suite needs them" >&2; exit 1; }; \
	  else \
	    echo "missing:$$missing: the suite needs them (as root: apt-get install$$packages)" >&2; \
	    exit 1; \
	  fi; \
	fi; \
	missing=""; for t in $(RECIPE_TOOLS); do command -v $${t%%:*} >/dev/null || missing="$$missing $${t%%:*}"; done; \
	if [ -n "$$missing" ]; then echo "still missing after the install:$$missing" >&2; exit 1; fi

# The embedded Apache Kafka of `make dev` and the suite: Java 17 runs it, Maven lays out its jars
# once (chronos/embedded/kafka/pom.xml). Installed when missing and we are root; otherwise
# `chronos dev` names what to install and exits 2.
KAFKA_PACKAGES := openjdk-17-jre-headless maven
kafka-deps:
	@missing=""; for b in java mvn; do command -v $$b >/dev/null || missing="$$missing $$b"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages for:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(KAFKA_PACKAGES); \
	  else \
	    echo "missing:$$missing (apt-get install $(KAFKA_PACKAGES))" >&2; \
	  fi; \
	fi

# The embedded broker's jars, laid out by Maven once (chronos/embedded/kafka/pom.xml) and cached:
# before the suite, so that a machine that cannot fetch them stops here, with Maven's reason,
# rather than in every test that needs the broker.
kafka-jars: $(DEV_STAMP) kafka-deps
	$(BIN)/python -c "from chronos.embedded.kafka.jars import jar_dir; print('Apache Kafka:', jar_dir())"

# The fast tier: no services, a few seconds.
unit: $(DEV_STAMP)
	$(BIN)/python -m pytest tests/unit $(ARGS)

check: lint format-check typecheck docs

# ruff, then the package's import layers (pyproject.toml [tool.importlinter]).
lint: $(DEV_STAMP)
	$(BIN)/ruff check chronos tests loadtest
	$(BIN)/lint-imports

format-check: $(DEV_STAMP)
	$(BIN)/ruff format --check chronos tests loadtest

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

# The documentation site (docs/, mkdocs.yml) into .chronos/site; --strict: a broken link or
# anchor fails the build.
docs: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The long fault scenarios, which `make test` leaves out (each skips without its switch, saying
# why): the full-size broker kills, the rolling restart and the broker partition at 1,000 msg/s
# (CHRONOS_TEST_BROKER_FAILOVER=1), with every outage two minutes long, a managed database's or
# broker's failover (CHRONOS_TEST_OUTAGE_S=120), and the scenarios' full-size variants (the paced
# catch-up of 60,000 rows, the broker-driven group protocol: CHRONOS_FAULT_LONG=1). About 35
# minutes; docs/development.md.
# tests/unit/test_no_silent_skips.py holds the switches, the files and this target together.
LONG_SWITCHES := CHRONOS_TEST_BROKER_FAILOVER=1 CHRONOS_TEST_OUTAGE_S=120 CHRONOS_FAULT_LONG=1
LONG_TESTS := tests/fault/test_16_dependency_outages.py tests/fault/test_21_broker_failover.py \
              tests/fault/test_22_paced_catchup.py tests/fault/test_25_broker_partition.py \
              tests/fault/test_26_group_protocol.py tests/fault/test_28_shard_outage.py
test-long: $(DEV_STAMP) system-deps kafka-jars
	$(LONG_SWITCHES) $(BIN)/python -m pytest $(LONG_TESTS) $(ARGS)

# The fault-injection suite alone (also part of `make test`), then the README's Reliability table.
reliability: $(DEV_STAMP)
	rm -rf .chronos/reliability
	$(BIN)/python -m pytest tests/fault $(ARGS); status=$$?; \
	$(BIN)/python -m tests.support.checker; exit $$status

# The headline benchmark: ceiling, sustained, precision, burst, backlog; writes BENCHMARK.md.
bench: $(DEV_STAMP)
	$(BIN)/python -m loadtest bench $(ARGS)

# The soak: two nodes, an open-loop mix at 10,000 msg/s for an hour (ARGS="--duration 4m
# --rate 2000"), sampled every 10 s, drained, analysed by Spark: report.html and verdicts.
soak: $(DEV_STAMP)
	$(BIN)/python -m loadtest soak $(ARGS)

# Renew the lock files: resolve each set in a fresh virtualenv and record exact versions.
lock:
	sh requirements/lock.sh $(PYTHON)

clean:
	rm -rf $(VENV) .chronos .pytest_cache
