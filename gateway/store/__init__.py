"""Shared state that outlives a request, one interface per use and three backends chosen by
`store.url` (memory, sqlite, redis): the key-value store (kv.py: stored responses, key
health) and the accounting store (ledger.py: virtual keys, budgets, rate-limit windows,
spend)."""
