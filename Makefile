# The project's own commands. Each one creates .venv and installs what it needs, so
# `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-micro clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m gateway serve $(if $(CONFIG),--config $(CONFIG))

test: $(STAMP)
	bash tests/install_deps.sh
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check gateway tests bench
	$(PY) -m ruff format --check gateway tests bench
	$(PY) -m mypy

bench: $(STAMP)
	bash bench/install_deps.sh
	$(PY) -m bench.load
	$(PY) -m pytest -q bench/micro --benchmark-enable --benchmark-only -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info
