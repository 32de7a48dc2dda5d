# Thin entry points; the work is done by the scripts they call.
SHELL := /bin/bash
PYTHON ?= python3
CACHE := $(or $(CORDUM_CACHE_DIR),$(XDG_CACHE_HOME),$(HOME)/.cache)/cordum-serverless
PINS := $(shell cat pyproject.toml | sha256sum | cut -c1-12)
VENV := $(CACHE)/venv-$(PINS)
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/shared:$(CURDIR)
export CORDUM_CACHE_DIR := $(CACHE)

.PHONY: setup up down test unit integration e2e infra-test bench layer lint

setup: $(VENV)/.ok

$(VENV)/.ok: pyproject.toml
	@echo "==> project venv $(VENV) (first time: about a minute)"
	@$(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -c 'import tomllib;p=tomllib.load(open("pyproject.toml","rb"))["project"];print("\n".join(p["dependencies"]+p["optional-dependencies"]["dev"]+p["optional-dependencies"]["infra"]))' > $(VENV)/requirements.txt
	@$(PY) -m pip install -q --progress-bar off -r $(VENV)/requirements.txt
	@ln -sfn $(VENV) .venv
	@touch $@
