"""A redis cache shared by two gateway processes, and a redis killed under load: every
request still answered (the cache a miss while it is gone)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cache.clients import chat
from tests.cache.clients import upstream_calls
from tests.cache.conftest import cache_config
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.redis_server import RedisServer
from tests.redis_server import redis_server
from tests.upstreams.openai_upstream import FakeOpenAI

__all__ = ["redis_server"]
pytestmark = pytest.mark.e2e


@pytest.fixture
def two_gateways(
    upstream: FakeOpenAI, redis_server: RedisServer, tmp_path: Path
) -> Iterator[tuple[Gateway, Gateway]]:
    # accounting stays in memory: only the cache lives in redis, so killing redis below
    # shows what the cache does, not what a store-backed budget does (it fails closed)
    section = f'{{mode: exact, store: redis, url: "{redis_server.url()}"}}'
    config = cache_config(upstream, section)
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    one = start_gateway(config, tmp_path / "one")
    try:
        two = start_gateway(config, tmp_path / "two")
    except BaseException:
        stop_gateway(one)
        raise
    yield one, two
    stop_gateway(one)
    stop_gateway(two)


def test_two_gateways_share_one_redis_cache(
    two_gateways: tuple[Gateway, Gateway], upstream: FakeOpenAI
) -> None:
    one, two = two_gateways
    prompt = f"shared {uuid.uuid4().hex}"
    header, first = chat(one, prompt, stream=True)
    assert header == "miss"
    header, again = chat(two, prompt, stream=True)
    assert header == "hit"
    assert again == first
    assert upstream_calls(upstream, prompt) == 1


def test_redis_killed_under_load_every_request_answered(
    two_gateways: tuple[Gateway, Gateway], upstream: FakeOpenAI, redis_server: RedisServer
) -> None:
    one, _ = two_gateways
    prompts = [f"load {i} {uuid.uuid4().hex}" for i in range(8)]
    failures: list[BaseException] = []
    stop = threading.Event()

    def load(worker: int) -> int:
        done = 0
        while not stop.is_set():
            try:
                header, answer = chat(
                    one, prompts[(worker + done) % len(prompts)], stream=done % 2 == 0
                )
                assert header in ("hit", "miss")
                assert answer["text"]
            except BaseException as exc:
                failures.append(exc)
                return done
            done += 1
        return done

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(load, w) for w in range(4)]
        stop.wait(1.0)
        redis_server.stop()
        stop.wait(1.5)
        stop.set()
        served = sum(f.result() for f in running)
    assert not failures, failures[:3]
    assert served > 8
