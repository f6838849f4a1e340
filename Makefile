# Chronos: the two commands of the README.
#   make dev    bring the whole system up on embedded defaults (Postgres, Kafka-protocol broker, 2 nodes)
#   make test   run the full test suite (starts and stops the services it needs)
# Both create ./.venv and install what they need into it.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test install lint typecheck clean reliability bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

dev: $(STAMP)
	$(BIN)/chronos dev $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(ARGS)

# The fault-injection suite alone (also part of `make test`), then the README's Reliability table.
reliability: $(STAMP)
	rm -rf .chronos/reliability
	$(BIN)/python -m pytest tests/fault $(ARGS); status=$$?; \
	$(BIN)/python -m tests.support.checker; exit $$status

# The headline benchmark: ceiling, sustained, precision, burst, backlog; writes BENCHMARK.md.
bench: $(STAMP)
	$(BIN)/python -m loadtest bench $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check chronos tests loadtest

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .chronos .pytest_cache
