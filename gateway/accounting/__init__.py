"""Accounting: what each request costs (prices.py, prices.json, usage.py), virtual keys
(keys.py, keys_cli.py), and the per-request service that admits, settles and releases
(service.py). State lives in the accounting store (gateway/store/ledger.py); this package
never talks to a backend directly and imports nothing from gateway/server."""
