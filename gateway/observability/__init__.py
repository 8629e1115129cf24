"""Prometheus metrics (metrics.py over registry.py and segments.py: values in shared memory,
merged over worker processes), the per-request record behind the request metrics and the
access log (access.py), and logging setup with secret redaction (logs.py). Imports nothing
of the request path but the request-id key; the request path reaches metrics through the
objects built here."""
