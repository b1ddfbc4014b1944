# The two commands of the README, and the pieces they are made of.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: quickstart test install install-dev stubs images

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .

install-dev: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"

## Install and run the quickstart simulation (embedded backends, no Docker).
quickstart: install
	$(BIN)/cosim run examples/quickstart.yaml

## Install the test dependencies and run the whole test suite.
test: install-dev
	$(BIN)/pytest

## Regenerate stubs/ from proto/.
stubs: install-dev
	PATH=$(abspath $(BIN)):$$PATH scripts/gen_stubs.sh

## Build the container images (local base image where no registry is reachable).
images:
	containers/build.sh
