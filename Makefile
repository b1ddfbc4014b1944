# The two commands of the README, and the pieces they are made of.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: quickstart test lint typecheck-tree install install-dev native pure stubs images browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Installs are stamped in the venv and redone only when the packaging changes. setuptools announces
# every editable install with a multi-line "Editable installation." notice (information, not a
# problem), which pip relays even with --quiet; it is filtered out, warnings about the packaging are not.
PACKAGING = pyproject.toml setup.py
PIP_INSTALL = PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet

$(VENV)/.installed: $(PACKAGING) | $(BIN)/python
	$(PIP_INSTALL) -e .
	@touch $@

$(VENV)/.installed-dev: $(PACKAGING) | $(BIN)/python
	$(PIP_INSTALL) -e ".[dev]"
	@touch $@ $(VENV)/.installed

# The compiled core (core/: Rust, PyO3), built by maturin with the machine's Rust toolchain (cargo) and
# installed into the venv as the module cosim_core; rebuilt whenever its sources change.
CORE_SOURCES = $(wildcard core/src/*.rs core/src/*/*.rs) core/Cargo.toml core/Cargo.lock core/pyproject.toml core/cosim_core.pyi

$(VENV)/.core: $(CORE_SOURCES) | $(BIN)/python
	@command -v cargo >/dev/null 2>&1 || { echo "cosim's core is Rust: install a Rust toolchain (https://rustup.rs) and rerun"; exit 1; }
	$(PIP_INSTALL) --force-reinstall --no-deps ./core
	@touch $@

install: $(VENV)/.installed $(VENV)/.core

install-dev: $(VENV)/.installed-dev $(VENV)/.core

## Compile the simulation's hot path with mypyc (hub/native.py; a C compiler needed): same results, faster.
native: install-dev
	COSIM_NATIVE=1 $(PIP_INSTALL) --no-build-isolation --no-deps -e .

## Remove the native build: back to pure Python.
pure:
	find hub adapters -name '*.so' -delete
	rm -f hub/native_build.json

## Install and run the quickstart simulation (embedded backends, no Docker).
quickstart: install
	$(BIN)/cosim run examples/quickstart.yaml --overwrite

## Install the test dependencies, lint, type-check and run the whole test suite.
test: lint browser
	$(BIN)/pytest

## Headless Chromium (Debian's package) for the report.html test: installed once, quietly, where apt-get
## may run (root or passwordless sudo); otherwise that test is skipped and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo "sudo -n" ); \
	  { $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -qq >/dev/null 2>&1 && \
	      $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; }; } || \
	  echo "make browser: could not install chromium; the report.html browser test will be skipped"; }

## ruff on the whole tree, mypy on hub/ and adapters/sdk/ (settings in pyproject.toml), rustfmt on core/.
lint: install-dev typecheck-tree
	$(BIN)/ruff check .
	$(BIN)/mypy
	@if cargo fmt --version >/dev/null 2>&1; then cd core && cargo fmt --check; \
	else echo "make lint: rustfmt is not installed (rustup component add rustfmt); core/ not format-checked"; fi

# mypy finds hub/ as cosim.hub (and so on, as setup.py maps them) through these links; see [tool.mypy].
TYPECHECK = build/typecheck/cosim
typecheck-tree:
	@mkdir -p $(TYPECHECK)
	@ln -sfn ../../../api/__init__.py $(TYPECHECK)/__init__.py
	@ln -sfn ../../../hub $(TYPECHECK)/hub
	@ln -sfn ../../../adapters $(TYPECHECK)/adapters
	@ln -sfn ../../../stubs/cosim/v1 $(TYPECHECK)/v1

## Regenerate stubs/ from proto/.
stubs: install-dev
	PATH=$(abspath $(BIN)):$$PATH scripts/gen_stubs.sh

## Build the container images (local base image where no registry is reachable).
images:
	containers/build.sh
