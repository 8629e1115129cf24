"""The response cache (issue 22, docs/cache.md): the same question answered once, replayed
in the client's own API and mode.

Owns the canonical key (key.py), the stored answer (entry.py), the stores (store.py), the
cache's decisions per request (service.py) and serving a hit (replay.py). It must not import
gateway/upstream, gateway/routing or gateway/server: the request path calls in, never the
reverse.
"""
