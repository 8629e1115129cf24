"""Accounting tests share the real redis-server fixture (tests/redis_server.py)."""

from tests.redis_server import redis_server

__all__ = ["redis_server"]
