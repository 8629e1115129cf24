"""The operator console at /ui/ (docs/console.md): its sessions (sessions.py), the overview's
samples of the metrics (overview.py), its routes and headers (routes.py), and the page's own
files (static/). Nothing here is on an inference request's path."""
