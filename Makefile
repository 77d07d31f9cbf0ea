# The two commands a newcomer runs: `make run` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run
INSTALL_LOG := $(VENV)/install.log

.PHONY: run test fuzz lint typecheck imports bench clean services

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found (Placer needs Python 3.11)"; exit 1; }
	@$(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --upgrade pip >$(INSTALL_LOG) 2>&1 || { tail -n 20 $(INSTALL_LOG); echo "make: upgrading pip failed; the whole output is in $(INSTALL_LOG)"; exit 1; }

$(STAMP): $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt -e ".[all,dev]"
	@touch $(STAMP)

# `make run` installs only what the service needs (no test tools, torch or browser driver), quietly:
# pip's output goes to $(INSTALL_LOG), shown when it fails.  A venv that `make test` filled already has it.
$(RUN_STAMP): $(VENV)/bin/python pyproject.toml constraints.txt
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt constraints.txt ]; then :; \
	else echo "make: installing the service into $(VENV) (pip's output: $(INSTALL_LOG))"; \
	$(PIP) install -q -c constraints.txt -e . >>$(INSTALL_LOG) 2>&1 || { tail -n 20 $(INSTALL_LOG); \
	echo "make: pip install failed; the whole output is in $(INSTALL_LOG)"; exit 1; }; fi
	@touch $(RUN_STAMP)

run: $(RUN_STAMP)
	@$(BIN)/placer serve --demo

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy solvers service client cli extract launcher

imports: $(STAMP)
	$(BIN)/lint-imports

# Two processes (pytest-xdist), a test file's tests in one of them (module-scoped servers start once).
# Files in collection order, the long (``slow``) ones first (tests/conftest.py), not xdist's most-tests-first.
PYTEST_WORKERS ?= 2
test: $(STAMP) lint typecheck imports
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Property tests with random examples, ten times as many (profile `fuzz`, tests/conftest.py).
fuzz: $(STAMP)
	PLACER_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q -p no:cacheprovider tests/solvers $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
