# The README's two commands are `make demo` and `make test`; both install what they need.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export AWS_DEFAULT_REGION ?= us-east-1
# Python caches compiled modules (__pycache__, ignored by git and by every asset and wheel): where the
# environment turns that off, every process (each pytest worker, each isolate of the local runtime, each
# subprocess test) compiles the project's modules and pytest rewrites every test module again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast lint format sim synth deploy bench install dist clean

# The web console's browser tests drive Debian's chromium (never a downloaded browser build).
CHROMIUM := /usr/bin/chromium
# the cold start bench's instruction counts (ops/bench/instructions.py) and their test
VALGRIND := /usr/bin/valgrind
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

install: $(VENV)/.installed node_modules/.installed

$(VENV)/.installed: requirements.txt functions/requirements.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	# editable: the runtime and the constructs (from functions/ and infra/) and the operator tooling (the `jobfence` command)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e packages/jobfence -e packages/jobfence-cdk -e .
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: install
	$(PY) -m jobfence_ops demo

# The suite on every core (pytest-xdist): tests that share a session resource (the deployed local
# runtime in tests/sim, the synthesized app in tests/infra) stay on one worker in file order
# (tests/conftest.py); TEST_WORKERS=0 runs it serially. Lint and types run first: seconds, and a
# finding fails the run before the suite starts.
TEST_WORKERS ?= auto
test: lint $(CHROMIUM) $(VALGRIND)
	$(PY) -m pytest -n $(TEST_WORKERS)

# ruff (lint, then the format check) and mypy over the code the project ships and runs; their
# settings and strictness are in pyproject.toml. Each prints its findings; all three always run.
LINT_PATHS := functions infra jobfence_ops ops app.py
lint: install
	@status=0; \
	$(VENV)/bin/ruff check $(LINT_PATHS) || status=1; \
	$(VENV)/bin/ruff format --check $(LINT_PATHS) || status=1; \
	$(VENV)/bin/mypy || status=1; \
	exit $$status

# Rewrites the files in place: ruff's safe fixes (import order, ...), then its formatter.
format: install
	$(VENV)/bin/ruff check --fix --exit-zero --quiet $(LINT_PATHS)
	$(VENV)/bin/ruff format $(LINT_PATHS)

# The fast tier, for every iteration: the tests not marked `slow` (no deployed runtime, CDK synthesis,
# subprocess, wheel build or simulator campaign; pyproject.toml says what `slow` covers), on every core.
test-fast: install
	$(PY) -m pytest -n $(TEST_WORKERS) -m "not slow"

$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

$(VALGRIND):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y valgrind

# The fault simulator (docs/guarantees.md): thousands of seeds of every family, in two processes.
SIM_SEEDS ?= 0:3000
sim: install
	$(PY) -m jobfence_ops sim --seeds $(SIM_SEEDS) --jobs 2

# cdk-nag (AwsSolutions + Serverless) runs inside the app and fails synthesis on any
# unacknowledged finding; cfn-lint then checks every synthesized template.
synth: install
	npx cdk synth --quiet
	$(VENV)/bin/cfn-lint cdk.out/*.template.json

deploy: install
	npx cdk deploy --all

bench: install $(VALGRIND)
	$(PY) -m ops.bench

# The distributions (packages/*: the runtime `jobfence`, its test kit and fault simulator among it, and
# the constructs `jobfence-cdk`, which an outside app installs; and `jobfence-ops`, this root, the
# operator tooling), as wheels in dist/, built offline from this venv.
DIST_PACKAGES := packages/jobfence packages/jobfence-cdk .
dist: | $(VENV)/.installed  # order-only: building the wheels needs the venv, not a fresh install
	rm -rf dist $(addsuffix /build,$(DIST_PACKAGES))
	$(PY) -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w dist $(DIST_PACKAGES)
	rm -rf $(addsuffix /build,$(DIST_PACKAGES)) $(addsuffix /*.egg-info,$(DIST_PACKAGES))
	ls dist

clean:
	rm -rf cdk.out .build .jobfence/synth dist
