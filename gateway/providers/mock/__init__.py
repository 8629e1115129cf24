"""The `mock` kind: an in-process provider that plays back a canned stream (the default config,
tests, benchmarks)."""
