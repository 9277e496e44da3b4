# Every target creates the virtualenv it needs; `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= postgres,agents,bench,embeddings,test,docs
LOCOMO ?= ../shared/data/locomo
TAU_BENCH ?= ../shared/data/tau-bench

.PHONY: install lint typecheck unit integration notebooks docs test demo bench bench-readme clean

$(STAMP): pyproject.toml
	@echo "Creating $(VENV) and installing the package with the extras [$(EXTRAS)]"
	@echo "(first run only: 1-2 minutes, quiet until it is done)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)
	@echo "Installed into $(VENV)."

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

# -rs: say why each skipped test was skipped (missing PostgreSQL binaries, data, extras).
# -n: parallel workers (pytest-xdist); each has its own PostgreSQL cluster, port and temp dirs;
# worksteal: an idle worker takes queued tests from a busy one, so the slow ones do not pile up.
WORKERS ?= 2
PYTEST := $(BIN)/pytest -q -rs -n $(WORKERS) --dist worksteal

unit: install
	$(PYTEST) tests/unit_tests langchain_histcompress

integration: install
	$(PYTEST) tests/integration_tests

notebooks: install
	OPENAI_API_KEY= $(PYTEST) -o addopts= --nbmake cookbook

# The documentation site (mkdocs-material + mkdocstrings), built offline into site/.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: install
	$(MKDOCS) build --strict --site-dir site

# Offline on purpose: an API key in the environment must not turn tests into paid calls.
test: lint typecheck
	OPENAI_API_KEY= HYPOTHESIS_PROFILE=repeatable $(PYTEST) --durations=10
	OPENAI_API_KEY= $(PYTEST) -o addopts= --nbmake cookbook
	$(MKDOCS) build --strict --quiet --site-dir site

demo: install
	$(BIN)/histcompress demo

# Figures, JSON, Markdown and plots go to bench-out/; README.md is left alone.
bench: install
	$(BIN)/histcompress bench --data $(LOCOMO) --agent-data $(TAU_BENCH) --out bench-out --faces

# The same run, also writing the headline figures between the README's bench markers and
# every table between those of the documentation's benchmark page.
bench-readme: install
	$(BIN)/histcompress bench --data $(LOCOMO) --agent-data $(TAU_BENCH) --out bench-out --readme README.md --docs docs/benchmark.md --faces

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis bench-out site
