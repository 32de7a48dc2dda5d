# Thin entry points; the work is done by the scripts they call.
SHELL := /bin/bash
PYTHON ?= python3
CACHE := $(or $(CORDUM_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cordum-serverless)
# The venv is keyed by the pinned dependency lists, not by the whole pyproject.toml.
DEPS_CMD := import tomllib;p=tomllib.load(open("pyproject.toml","rb"))["project"];d=p["optional-dependencies"];print("\n".join(p["dependencies"]+d["dev"]+d["infra"]))
PINS := $(shell $(PYTHON) -c '$(DEPS_CMD)' | sha256sum | cut -c1-12)
VENV := $(CACHE)/venv-$(PINS)
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/shared:$(CURDIR)
export CORDUM_CACHE_DIR := $(CACHE)

.PHONY: setup up down status demo test test-fast test-unit test-dashboard e2e layer dashboard synth lint bench profile bench-roundtrips bench-cpu chaos

## setup: the project venv (cached by the hash of pyproject.toml), linked as .venv, with
## `cordumctl` on its PATH
setup: $(VENV)/.ok
	@ln -sfn $(VENV) .venv
	@# The venv is shared by every clone with the same pins, so its cordumctl runs the
	@# library of the clone that last ran `make setup` (an editable install would keep the first).
	@printf '#!%s\nimport sys\nsys.path.insert(0, "%s/shared")\nfrom cordumctl.app import main\nsys.exit(main())\n' \
		'$(PY)' '$(CURDIR)' > $(VENV)/bin/cordumctl && chmod +x $(VENV)/bin/cordumctl

$(VENV)/.ok:
	@echo "==> project venv $(VENV) (first time: a few minutes; log in $(VENV).log)"
	@rm -rf $(VENV) && $(PYTHON) -m venv $(VENV)
	@$(PY) -c '$(DEPS_CMD)' > $(VENV)/requirements.txt
	@$(PY) -m pip install --progress-bar off -r $(VENV)/requirements.txt > $(VENV).log 2>&1 \
		|| { tail -30 $(VENV).log; rm -rf $(VENV); exit 1; }
	@touch $@

## up: the whole stack on LocalStack, then a demo job over HTTP
up: setup
	@$(PY) localstack/stack.py up

## down: stop everything `make up` started
down:
	@# Any Python 3.11 stops it: a changed pyproject.toml must not leave services running.
	@if [ -x $(PY) ]; then $(PY) localstack/stack.py down; else $(PYTHON) localstack/stack.py down; fi

status: setup
	@$(PY) localstack/stack.py status

demo: setup
	@$(PY) localstack/stack.py demo

## test: the lint (style, types, layer contract), unit, infra and integration (real Redis
## and NATS), the dashboard's tests, then e2e on LocalStack
test: lint test-fast test-dashboard e2e

test-fast: setup
	@$(PY) localstack/stack.py services
	@$(PY) -m pytest -q tests/unit tests/infra tests/integration tests/security

## test-unit: the unit tests alone, with no service (no Redis, no NATS: a unit test that
## connects to one fails; tests/unit/conftest.py); a few seconds
test-unit: setup
	@$(PY) -m pytest -q tests/unit

## test-dashboard: the dashboard's Vitest tests and ESLint (after its build: the lint reads
## the API types the build generates)
test-dashboard: setup
	@$(PY) dashboard/build.py test --python $(PY)

e2e: setup
	@$(PY) localstack/stack.py e2e tests/e2e -q

layer: setup
	@$(PY) layers/build.py

## dashboard: dashboard/dist (npm ci once into the cache, the API types from the gateway's
## OpenAPI document, type check, bundle, first-load size check); skipped while dist/ is
## newer than its sources: `make dashboard DASHBOARD_ARGS=--force` builds anyway
dashboard: setup
	@$(PY) dashboard/build.py build --python $(PY) $(DASHBOARD_ARGS)

## synth: each CDK template (AWS with its own VPC and NATS cluster, AWS in an existing VPC
## answered from tests/infra/fixtures/cdk.context.json, LocalStack) offline, with cdk-nag,
## then cfn-lint (infra/cdk/.cfnlintrc); written to infra/cdk/cdk.out/{aws,aws-vpc,local}
synth: setup layer
	@$(PY) infra/cdk/deploy.py synth

## lint: ruff, mypy, and the layer contract over the import graph (tests/lint/layers.py)
lint: setup
	@$(PY) -m ruff check shared functions localstack layers infra dashboard/build.py tests
	@$(PY) -m mypy shared/cordum shared/cordumctl functions
	@$(PY) -m pytest -q tests/lint

## bench: every budget (docs/operations.md) measured beside its floor; rewrites BENCHMARKS.md
## (never part of `make test`; brings the local stack up for items 4 and 6 when it is not up,
## and down again after; CORDUM_LOCAL_ENV=<path>/local.env points it at another stack)
bench: setup
	@$(PY) localstack/stack.py services
	@$(PY) -m tests.bench.run_all

## profile: cProfile of each hot path (gateway submit, submit and result functions, workflow
## job-ended events) in process on the real Redis and NATS; writes profiles/<path>.txt and
## profiles/summary.json, which BENCHMARKS.md's "Where the time goes" is rendered from
## (a minute or two; not part of `make test`)
profile: setup
	@$(PY) localstack/stack.py services
	@$(PY) -m tests.bench.profile $(PROFILE_ARGS)

## chaos: faults injected one by one under load on a private Redis and NATS; rewrites
## RELIABILITY.md (about 15 minutes; not part of `make test`)
chaos: setup
	@$(PY) localstack/chaos.py $(CHAOS_ARGS)

bench-roundtrips: setup
	@$(PY) localstack/stack.py services
	@$(PY) -m tests.bench.bench_roundtrips 20 --policy on
	@$(PY) -m tests.bench.bench_roundtrips 20 --policy off

bench-cpu: setup
	@$(PY) localstack/stack.py services
	@$(PY) -m tests.bench.bench_handler_cpu 20
