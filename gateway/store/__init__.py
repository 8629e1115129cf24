"""Shared state that outlives a request: stored responses now; budgets, windows and key
health with accounting. One interface, three backends chosen by `store.url`."""
