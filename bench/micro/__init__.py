"""Microbenchmarks of the gateway's per-event hot path (pytest-benchmark); see
docs/microbenchmarks.md."""
