"""Prometheus metrics (and, later, structured logs and request ids); imports nothing of the
request path, which reaches metrics through the objects built here."""
