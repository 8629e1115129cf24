"""A model id with a path dot segment in it, escaped or not, is a 400 before any lookup: no
upstream path is ever built from one (Router.targets, Router.plan), and path_segment
refuses one too as a backstop."""

from __future__ import annotations

import random
from datetime import UTC
from datetime import datetime
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import parse_config
from gateway.errors import BadRequest
from gateway.providers.base import DECODE_ROUNDS
from gateway.providers.base import BearerToken
from gateway.providers.base import UpstreamCall
from gateway.providers.base import has_dot_segment
from gateway.providers.base import path_segment
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import parse_input
from gateway.providers.registry import embeddings_provider
from gateway.providers.registry import make_adapter
from gateway.routing.router import Router
from gateway.wire.openai_chat import ChatRequest

CONFIG = """
providers:
  - {name: azure, kind: azure, base_url: "http://az.test", api_version: "2024-10-21",
     keys: [{key: az-key}]}
  - {name: up, kind: openai, base_url: "http://up.test/v1", keys: [{key: up-key}]}
  - {name: bd, kind: bedrock, base_url: "http://bd.test", region: us-east-1,
     keys: [{aws_access_key_id: AKIATEST, aws_secret_access_key: secret}]}
  - {name: ge, kind: gemini, base_url: "http://ge.test", keys: [{key: ge-key}]}
models:
  - {name: gpt, targets: [{provider: up, model: gpt-4.1-mini}]}
  - {name: "..", targets: [{provider: up, model: gpt-4.1-mini}]}
"""

DOT_MODELS = [
    ".",
    "..",
    "%2e",
    "%2E",
    "%2e%2e",
    "%2E%2e",
    ".%2e",
    "%2e.",
    "%252e%252e",
    "%252E%252E",
    "%25252e",
    "azure/..",
    "azure/.",
    "azure/%2e%2e",
    "azure/%252E%252E",
    "azure/.%2E",
    "up/../x",
    "up/a/../../b",
    "up/a/./b",
    "up/a/..",
    "up/a%2F..%2Fb",
    "up/a%252F..%252Fb",
    "up/a\\..\\b",
    "../x",
    "bd/..",
    "ge/models/..",
]
FINE_MODELS = [
    "gpt",
    "up/gpt-4.1-mini",
    "up/a..b",
    "up/...",
    "up/.hidden",
    "up/v1.2/x",
    "up/100%",
    "up/a%2Fb",
    "ge/models/gemini-2.5-flash",
    "bd/anthropic.claude-3-5-sonnet-20240620-v1:0",
]


def router() -> Router:
    cfg = parse_config(CONFIG, env={})
    adapters = {p.name: make_adapter(p) for p in cfg.providers}
    return Router(cfg, adapters, rng=random.Random(0))


@pytest.mark.parametrize("model", DOT_MODELS)
def test_targets_refuses_a_dot_segment_with_400(model: str) -> None:
    with pytest.raises(BadRequest) as caught:
        router().targets(model)
    assert caught.value.status == 400
    assert caught.value.param == "model"
    assert caught.value.code == "invalid_model"


@pytest.mark.parametrize("model", DOT_MODELS)
def test_plan_refuses_a_dot_segment_with_400(model: str) -> None:
    with pytest.raises(BadRequest) as caught:
        router().plan(model)
    assert caught.value.code == "invalid_model"


def test_a_configured_model_named_dot_dot_is_refused_too() -> None:
    """The name of a configured model never reaches a path, but every route answers `..`
    alike: plan does not serve what targets refuses."""
    r = router()
    for call in (r.targets, r.plan):
        with pytest.raises(BadRequest):
            call("..")


@pytest.mark.parametrize("model", FINE_MODELS)
def test_other_names_are_routed_as_before(model: str) -> None:
    assert not has_dot_segment(model)
    assert router().targets(model)
    assert router().plan(model)


def test_refused_names_are_not_cached_in_the_plan_cache() -> None:
    r = router()
    for model in DOT_MODELS:
        with pytest.raises(BadRequest):
            r.plan(model)
    assert not set(DOT_MODELS) & set(r._fixed)


@given(
    st.sampled_from([".", ".."]),
    st.integers(min_value=0, max_value=DECODE_ROUNDS),
    st.text(alphabet="abc-_", max_size=4),
    st.text(alphabet="abc-_", max_size=4),
)
def test_encoded_dot_segments_are_found_at_any_depth_and_case(
    dots: str, rounds: int, before: str, after: str
) -> None:
    encoded = dots
    for _ in range(rounds):
        encoded = quote(encoded, safe="").replace(".", "%2E")
    upper = f"up/{before}/{encoded}/{after}".strip("/")
    for name in (upper, upper.lower(), encoded):
        assert has_dot_segment(name), name


@pytest.mark.parametrize("rounds", range(8))
def test_a_name_encoded_any_number_of_times_is_refused(rounds: int) -> None:
    """Within DECODE_ROUNDS it is decoded and found; beyond, refused as still encoded."""
    for dots in (".", ".."):
        name = dots
        for _ in range(rounds):
            name = quote(name, safe="").replace(".", "%2E")
        assert has_dot_segment(name), name
        assert has_dot_segment(f"azure/{name}"), name


def test_a_deeply_encoded_ordinary_name_is_refused_too() -> None:
    name = "gpt-4.1"
    for _ in range(DECODE_ROUNDS + 2):
        name = quote(name, safe="").replace("-", "%2D")
    assert has_dot_segment(name)


@pytest.mark.parametrize("value", ["..", ".", "%2E%2E", "%252e", "a/../b", "a%2F..%2Fb"])
def test_path_segment_refuses_dot_segments(value: str) -> None:
    with pytest.raises(BadRequest):
        path_segment(value)


def test_path_segment_escapes_everything_else() -> None:
    assert path_segment("a..b") == "a..b"
    assert path_segment("a/b c") == "a%2Fb%20c"
    assert path_segment("gemini-2.5", safe="-._~") == "gemini-2.5"


@pytest.mark.parametrize("provider", ["azure", "bd", "ge"])
def test_adapters_never_build_a_path_from_a_dot_segment(provider: str) -> None:
    """Defence in depth: a call that did not come through the router (a configured target
    with such an upstream model) is refused by the adapter, not sent."""
    cfg = parse_config(CONFIG, env={})
    p = next(p for p in cfg.providers if p.name == provider)
    adapter = make_adapter(p)
    chat = ChatRequest(model="x", messages=[])
    for model in ("..", "%2e%2e", "models/.."):
        call = UpstreamCall(
            request=chat,
            body={"model": "x", "messages": []},
            provider=p,
            key=p.keys[0] if p.keys else None,
            model=model,
            stream=False,
            request_id="r1",
        )
        with pytest.raises(BadRequest):
            adapter.build_request(call)


@pytest.mark.parametrize("provider", ["azure", "bd", "ge"])
def test_embeddings_adapters_never_build_a_path_from_a_dot_segment(provider: str) -> None:
    """The same backstop for the embeddings families, whose upstream model is in the path."""
    cfg = parse_config(CONFIG, env={})
    p = next(p for p in cfg.providers if p.name == provider)
    family = embeddings_provider(p)
    for model in ("..", "%2e%2e", "models/.."):
        call = EmbeddingsCall(
            inputs=parse_input("hello"),
            body={"model": "x", "input": "hello"},
            dimensions=None,
            provider=p,
            key=p.keys[0] if p.keys else None,
            model=model,
            now=datetime.now(UTC),
            credential=BearerToken(token="t", expires_at=0.0),
        )
        with pytest.raises(BadRequest):
            family.plan(call)
