# Every target creates the virtualenv it needs; `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= postgres,agents,bench,test
LOCOMO ?= ../shared/data/locomo

.PHONY: install lint typecheck unit integration notebooks test demo bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest -q tests/unit_tests langchain_histcompress

integration: install
	$(BIN)/pytest -q tests/integration_tests

notebooks: install
	OPENAI_API_KEY= $(BIN)/pytest -q -o addopts= --nbmake cookbook

# Offline on purpose: an API key in the environment must not turn tests into paid calls.
test: lint typecheck
	OPENAI_API_KEY= $(BIN)/pytest -q
	OPENAI_API_KEY= $(BIN)/pytest -q -o addopts= --nbmake cookbook

demo: install
	$(BIN)/histcompress demo

bench: install
	$(BIN)/histcompress bench --data $(LOCOMO)/*.json --out bench-out

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis bench-out
