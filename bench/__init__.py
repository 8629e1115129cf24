"""Benchmarks: the load benchmark (``python -m bench.load`` with its fake upstream and wrk
driver) and the microbenchmarks in ``bench/micro/``. Imports nothing from ``gateway``: the load
benchmark drives the gateway as a separate process, over loopback HTTP."""
