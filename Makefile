# The two commands a newcomer runs: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed

.PHONY: run test fuzz lint typecheck imports bench clean services

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found (Placer needs Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(VENV)/bin/python pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt -e ".[all,dev]"
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/placer serve --demo

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy solvers service client cli extract launcher

imports: $(STAMP)
	$(BIN)/lint-imports

test: $(STAMP) lint typecheck imports
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# Property tests with random examples, ten times as many (profile `fuzz`, tests/conftest.py).
fuzz: $(STAMP)
	PLACER_HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q -p no:cacheprovider tests/solvers $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
