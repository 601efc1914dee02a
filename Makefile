# vigil's entry points for people and CI (README.md). Servers are plain processes started by
# deploy/kafka/kafka.sh and deploy/redis/redis.sh; settings come from the environment:
#   KAFKA_PORT (9092), KAFKA_CONTROLLER_PORT (9093), REDIS_PORT (6379), VIGIL_BROKER (kafka|tansu),
#   PYTEST_ARGS (pytest arguments; default: 4 workers, one test file per worker at a time), PYTEST_RC_FILE (where `make test` writes pytest's exit code),
#   VIGIL_NATIVE (0: neither build nor use the native hot path, native/; docs/architecture.md).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
KAFKA_PORT ?= 9092
KAFKA_CONTROLLER_PORT ?= 9093
REDIS_PORT ?= 6379
VIGIL_STATE ?= $(HOME)/.local/state/vigil
PYTEST_ARGS ?= -n 4 --dist loadfile
LINT_PATHS ?= .

export KAFKA_PORT KAFKA_CONTROLLER_PORT REDIS_PORT VIGIL_STATE
export VIGIL_PYTHON := $(abspath $(VENV))/bin/python

STAMP := $(VENV)/.vigil-installed
NATIVE_STAMP := $(VENV)/.vigil-native
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
CARGO_BUILD_JOBS ?= 2
export CARGO_BUILD_JOBS
KAFKA := bash deploy/kafka/kafka.sh
REDIS := bash deploy/redis/redis.sh

.PHONY: help venv native test run stop lint

help:
	@echo "make run    vigil dev: Kafka, Redis, topics, every vigil process and a demo; Ctrl-C stops all"
	echo "make test   install what is missing, start the servers unless they answer, run pytest, stop them"
	echo "make stop   stop a Kafka and Redis started by hand with deploy/*/*.sh start"
	echo "make lint   ruff, mypy and the layer contracts (LINT_PATHS=... to narrow ruff and mypy)"
	echo "make native build the native hot path (native/) into $(VENV) when cargo is present"

venv: $(STAMP)

# Reinstalled only when pyproject.toml changes.
$(STAMP): pyproject.toml
	@[[ -x $(VENV)/bin/python ]] || $(PYTHON) -m venv $(VENV)
	echo "make: installing vigil[dev] into $(VENV)"
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' \
	  >$(VENV)/.install.log 2>&1 || { tail -n 20 $(VENV)/.install.log; echo "make: pip install failed: see $(VENV)/.install.log"; exit 1; }
	touch $@

# The native hot path is optional: without cargo (or with VIGIL_NATIVE=0) vigil runs the
# pure-Python rules, and this says so in one line; with cargo a failed build is an error.
native: $(STAMP)
	@if [[ "$${VIGIL_NATIVE:-}" != 0 ]]; then
	  if command -v cargo >/dev/null || [[ -x "$$HOME/.cargo/bin/cargo" ]]; then
	    $(MAKE) --no-print-directory -q $(NATIVE_STAMP) || $(MAKE) --no-print-directory $(NATIVE_STAMP)
	  else
	    echo "make: cargo not found: vigil_native not built"
	  fi
	fi
	echo "make: $$($(VENV)/bin/python -m pipeline.rules.native)"

$(NATIVE_STAMP): $(NATIVE_SOURCES) | $(STAMP)
	@export PATH="$$PATH:$$HOME/.cargo/bin"
	echo "make: building vigil_native (cargo release build of native/, $$CARGO_BUILD_JOBS jobs)"
	start=$$(date +%s)
	VIRTUAL_ENV="$(abspath $(VENV))" $(VENV)/bin/maturin develop --release -m native/Cargo.toml \
	  >$(VENV)/.native.log 2>&1 || { tail -n 30 $(VENV)/.native.log
	  echo "make: native build failed: see $(VENV)/.native.log (VIGIL_NATIVE=0 skips it)"; exit 1; }
	echo "make: vigil_native built in $$(( $$(date +%s) - start )) s"
	touch $@

# Servers already answering on the configured ports are reused and left running; the ones
# started here live in a temporary directory and are stopped on the way out, pass or fail.
# With the native path built, the whole suite runs on it and the unit suite again on the
# Python path (VIGIL_NATIVE=0): the Python rules are the specification both are held to.
test: native
	@tmp="$$(mktemp -d "$${TMPDIR:-/tmp}/vigil-test.XXXXXX")"
	started=""
	cleanup() {
	  if [[ "$$started" == *redis* ]]; then REDIS_DIR="$$tmp/redis" $(REDIS) stop || true; fi
	  if [[ "$$started" == *kafka* ]]; then KAFKA_DATA_DIR="$$tmp/kafka" $(KAFKA) stop || true; fi
	  rm -rf "$$tmp"
	}
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	if [[ -n "$${KAFKA_BOOTSTRAP_SERVERS:-}" ]]; then
	  echo "make: using Kafka at $$KAFKA_BOOTSTRAP_SERVERS (KAFKA_BOOTSTRAP_SERVERS)"
	elif $(KAFKA) status; then
	  export KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$(KAFKA_PORT)"
	else
	  KAFKA_DATA_DIR="$$tmp/kafka" $(KAFKA) start
	  started="$$started kafka"
	  export KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$(KAFKA_PORT)"
	fi
	if [[ -n "$${REDIS_URL:-}" ]]; then
	  echo "make: using Redis at $$REDIS_URL (REDIS_URL)"
	elif $(REDIS) status; then
	  export REDIS_URL="redis://127.0.0.1:$(REDIS_PORT)/0"
	else
	  REDIS_DIR="$$tmp/redis" REDIS_APPENDONLY=no $(REDIS) start
	  started="$$started redis"
	  export REDIS_URL="redis://127.0.0.1:$(REDIS_PORT)/0"
	fi
	rc=0
	if [[ "$$($(VENV)/bin/python -m pipeline.rules.native)" == "hot path: native"* ]]; then
	  VIGIL_NATIVE=1 $(VENV)/bin/pytest $(PYTEST_ARGS) || rc=$$?
	  echo "make: the unit suite again on the Python path (VIGIL_NATIVE=0)"
	  r=0; VIGIL_NATIVE=0 $(VENV)/bin/pytest $(PYTEST_ARGS) -m unit || r=$$?
	  if ((r != 0 && r != 5 && rc == 0)); then rc=$$r; fi  # 5: PYTEST_ARGS chose no unit test
	else
	  $(VENV)/bin/pytest $(PYTEST_ARGS) || rc=$$?
	fi
	if [[ -n "$${PYTEST_RC_FILE:-}" ]]; then echo "$$rc" >"$$PYTEST_RC_FILE"; fi
	exit "$$rc"

# Everything on one machine: its own Kafka and Redis (state in .vigil/dev), the topics, every
# vigil process under one supervisor, a demo; Ctrl-C stops it all (`vigil dev`; README.md).
run: native
	@exec $(VENV)/bin/vigil dev

# Stops servers that `deploy/*/*.sh start` left running in $(VIGIL_STATE) (not `make run`'s).
stop:
	@$(KAFKA) stop
	$(REDIS) stop

lint: $(STAMP)
	@$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy $(if $(filter .,$(LINT_PATHS)),,$(filter %.py,$(LINT_PATHS)))
	$(VENV)/bin/lint-imports
	for script in deploy/kafka/kafka.sh deploy/redis/redis.sh .ci/run; do bash -n "$$script"; done
