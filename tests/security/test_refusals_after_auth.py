"""A client with a wrong key learns nothing of the models or their health: a refusal the
gateway makes before admission (an unknown model, a model whose keys all rest, a target that
cannot count tokens) is a 401 for a key that is not good, and the refusal itself for one that
is (before, an unknown model answered 404 to anyone, so model names could be probed)."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config

HI = [{"role": "user", "content": "hi"}]


async def test_an_unknown_model_is_a_401_for_a_bad_key_and_a_404_for_a_good_one() -> None:
    config = parse_config(
        """
store: {url: "memory://"}
auth: {master_key: mk-test}
providers: [{name: mock, kind: mock}]
models: [{name: known, targets: [{provider: mock, model: mock}]}]
keys: [{name: team, key: sk-gw-team-0123456789}]
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:

            async def post(path: str, model: str, key: str) -> int:
                async with session.post(
                    server.make_url(path),
                    json={"model": model, "messages": HI},
                    headers={"authorization": f"Bearer {key}"},
                ) as answer:
                    return answer.status

            for path in ("/v1/chat/completions", "/v1/messages/count_tokens"):
                assert await post(path, "secret-model-name", "sk-gw-guess") == 401
                assert await post(path, "known", "sk-gw-guess") == 401
            assert (
                await post("/v1/chat/completions", "secret-model-name", "sk-gw-team-0123456789")
                == 404
            )
            assert await post("/v1/chat/completions", "secret-model-name", "mk-test") == 404
    finally:
        await server.close()
