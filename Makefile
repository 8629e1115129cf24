# The project's own commands. Each one creates .venv and installs what it needs, so
# `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-micro rig clean fuzz soak

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
	$(PY) -m pytest -q bench/micro --benchmark-enable --benchmark-only -p no:cacheprovider \
		--benchmark-json bench/results/micro-$$(date -u +%Y%m%dT%H%M%SZ).json

# atheris on every sans-IO decoder and translator, FUZZ_SECONDS per target (docs/testing.md)
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(PY) -m fuzz.run_all --seconds $(FUZZ_SECONDS)

# nginx in front of two gateways sharing a redis-server, under load and a rolling restart;
# prints its figures (deploy/README.md, "Local rig")
rig: $(STAMP)
	bash tests/install_deps.sh
	bash bench/install_deps.sh
	$(PY) -m deploy.rig

# a bounded mixed load with the gateway's memory and fds sampled (SOAK_SECONDS, default 600)
soak: $(STAMP)
	$(PY) -m bench.soak

clean:
	rm -rf $(VENV) build *.egg-info
