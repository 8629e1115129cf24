# The project's own commands. Each one creates .venv and installs what it needs, so
# `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The runtime dependencies, pinned with their sha256 hashes (docs/supply-chain.md)
LOCK := requirements.lock
# the lock's pins without the hashes: keeps the dev extras from moving a locked package
LOCK_CONSTRAINTS := $(VENV)/lock-constraints.txt

.PHONY: run test lint lock bench bench-micro bench-peers bench-traffic bench-observe rig clean fuzz soak

# The runtime dependencies come from the lock alone (hash-checked), then the gateway without
# resolving anything (--no-deps), then the dev extras held to the lock's versions.
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	grep -E '^[A-Za-z0-9]' $(LOCK) | sed -e 's/ *\\$$//' > $(LOCK_CONSTRAINTS)
	$(PY) -m pip install --quiet -c $(LOCK_CONSTRAINTS) -e '.[dev]'
	touch $(STAMP)

# Regenerates requirements.lock from pyproject.toml's [project].dependencies (CPython 3.11,
# linux x86_64; the hashes are PyPI's). Keeps the current pins unless told otherwise:
#   make lock LOCK_ARGS='--upgrade-package aiohttp'   (one package)
#   make lock LOCK_ARGS=--upgrade                      (everything)
lock: $(STAMP)
	$(PY) -m uv pip compile pyproject.toml --quiet --generate-hashes \
		--python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
		--custom-compile-command 'make lock' --output-file $(LOCK) $(LOCK_ARGS)

run: $(STAMP)
	$(PY) -m gateway serve $(if $(CONFIG),--config $(CONFIG))

test: $(STAMP)
	bash tests/install_deps.sh
	$(PY) -m pytest -q

# The audit (tools/audit_lock.py): pip-audit over every pin of the lock; a pin pip-audit could
# not look up is judged from PyPI's per-project record, and one that cannot be judged either
# fails the target (never skipped).
lint: $(STAMP)
	$(PY) -m ruff check gateway tests bench tools
	$(PY) -m ruff format --check gateway tests bench tools
	$(PY) -m mypy
	$(PY) -m tools.audit_lock $(LOCK)

bench: $(STAMP)
	bash bench/install_deps.sh
	$(PY) -m bench.load
	$(PY) -m pytest -q bench/micro --benchmark-enable --benchmark-only -p no:cacheprovider \
		--benchmark-json bench/results/micro-$$(date -u +%Y%m%dT%H%M%SZ).json

# Side by side with LiteLLM and Portkey (bench/peers/, docs/benchmarks.md): one fake upstream,
# each gateway alone on CPU 1, cells interleaved; ours in the production configuration
# (bench/peers/ours.yaml). install_peers.sh puts the peers in PEERS_HOME (a cache outside the
# repository, once per machine) and wrk from Debian. Bounded: PEERS_ARGS's cells (~3 minutes
# with these defaults) and --max-total. Table and raw results in bench/results/peers-<UTC>/.
PEERS_HOME ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gw-peers
PEERS_PORT ?= 9000
PEERS_ARGS ?= --duration 4 --ttfb-duration 3 --rounds 1 --max-total 900
bench-peers: $(STAMP)
	PEERS_HOME='$(PEERS_HOME)' bash bench/peers/install_peers.sh
	out="$(CURDIR)/bench/results/peers-$$(date -u +%Y%m%dT%H%M%SZ)" && mkdir -p "$$out" && \
	PEERS_HOME='$(PEERS_HOME)' OURS_PORT=$(PEERS_PORT) OURS_DIR="$$out" \
	bash bench/peers/run_compare.sh --out-dir "$$out" \
		--extra ours 'exec $(CURDIR)/$(PY) -m gateway serve --config $(CURDIR)/bench/peers/ours.yaml' \
		http://127.0.0.1:$(PEERS_PORT)/v1/chat/completions --model ours ours \
		--header ours 'Authorization: Bearer sk-gw-bench-0123456789abcdef' $(PEERS_ARGS)

# Real LLM traffic shape (bench/traffic/, docs/benchmarks.md): thousands of paced streams held
# open, 1 KB - 1 MB prompts, tool-call streams; direct, ours, LiteLLM and Portkey each alone on
# CPU 1, the paced fake upstream and the load generator on CPU 0. Needs the peers of
# install_peers.sh. Bounded: every cell by its duration + drain, the run by --max-total (~20
# minutes with these defaults). Table and raw results in bench/results/traffic-<UTC>/.
#   make bench-traffic TRAFFIC_ARGS='--quick'                  (a smoke test, ~30 s)
#   make bench-traffic TRAFFIC_ARGS='--calibrate'              (the harness's own ceiling)
#   make bench-traffic TRAFFIC_ARGS='--scenario held --targets direct,ours'
TRAFFIC_ARGS ?= --rounds 1 --duration 20 --max-total 1500
bench-traffic: $(STAMP)
	PEERS_HOME='$(PEERS_HOME)' bash bench/peers/install_peers.sh
	PEERS_HOME='$(PEERS_HOME)' $(PY) -m bench.traffic.run $(TRAFFIC_ARGS)

# What the request log, tracing and the response cache cost (bench/observe_pairs.py): one
# bench.load --full gateway per --observe mode, all running, short wrk slices rotated over
# them (ratios taken within a round); OBSERVE_ARGS e.g.
# '--modes none,cache-hit,cache-miss --connections 1,16' (bench/observe_cost.py: the older
# one bench.load run per mode and round)
OBSERVE_ARGS ?= --modes none,log-sqlite,log-postgres,tracing --rounds 12 --slice 2
bench-observe: $(STAMP)
	bash bench/install_deps.sh
	bash tests/install_deps.sh
	$(PY) -m bench.observe_pairs $(OBSERVE_ARGS)

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
