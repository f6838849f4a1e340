# Chronos: the two commands of the README.
#   make dev    bring the whole system up on embedded defaults (Postgres, Kafka-protocol broker, 2 nodes)
#   make test   run the full test suite (starts and stops the services it needs)
# Both create ./.venv and install what they need into it.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test install lint typecheck clean

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

lint: $(STAMP)
	$(BIN)/ruff check chronos tests loadtest

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .chronos .pytest_cache
