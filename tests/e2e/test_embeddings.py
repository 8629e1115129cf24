"""openai-python's `embeddings.create` through a real gateway in front of a fake upstream
that speaks every provider kind's embeddings API (tests/upstreams/embeddings_upstream.py)."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from typing import Any

import httpx
import openai
import pytest

from gateway.providers.bedrock.sigv4 import sign
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.embeddings_upstream import FakeEmbeddings
from tests.upstreams.embeddings_upstream import fake_tokens
from tests.upstreams.embeddings_upstream import fake_vector
from tests.vertex_credentials import service_account_file

pytestmark = pytest.mark.e2e

TEXTS = ["hello world", "the quick brown fox", "z"]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEmbeddings]:
    upstream = FakeEmbeddings().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeEmbeddings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("gw-embeddings")
    credentials = service_account_file(folder, fake.base_url + "/token")
    base = fake.base_url
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - {{name: oa, kind: openai, base_url: "{base}/v1", keys: [{{key: sk-oa}}]}}
  - {{name: az, kind: azure, base_url: "{base}", api_version: "2024-10-21",
      keys: [{{key: az-key}}]}}
  - {{name: gem, kind: gemini, base_url: "{base}", keys: [{{key: AIza-fake}}]}}
  - {{name: vx, kind: vertex, base_url: "{base}", project: test-project, region: europe-west4,
      keys: [{{credentials_file: "{credentials}"}}]}}
  - {{name: br, kind: bedrock, region: us-east-1, base_url: "{base}",
      keys: [{{aws_access_key_id: AKIDEXAMPLE, aws_secret_access_key: secret}}]}}
  - {{name: oaslow, kind: openai, base_url: "{base}/v1", keys: [{{key: k}}],
      timeouts: {{total_s: 0.4}}}}
  - {{name: ol, kind: ollama, base_url: "{base}"}}
  - {{name: mock, kind: mock}}
  - {{name: claude, kind: anthropic, base_url: "{base}", keys: [{{key: k}}]}}
models:
  - name: fallback
    targets:
      - {{provider: oa, model: fail-500, priority: 0}}
      - {{provider: gem, model: text-embedding-004, priority: 1}}
  - name: titan-then-openai
    targets:
      - {{provider: br, model: "amazon.titan-embed-text-v2:0", priority: 0}}
      - {{provider: oa, model: text-embedding-3-small, priority: 1}}
  - name: tokens-anywhere
    targets:
      - {{provider: gem, model: text-embedding-004, priority: 0}}
      - {{provider: oa, model: text-embedding-3-small, priority: 1}}
"""
    gateway = start_gateway(config, folder)
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key="k", max_retries=0, timeout=20)


def f32(values: list[float]) -> list[float]:
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def estimated(texts: list[str]) -> int:
    return sum(max(1, math.ceil(len(t) / 4)) for t in texts)


COUNTED = sum(fake_tokens(t) for t in TEXTS)
# model -> (provider name, upstream model, prompt tokens)
KINDS: dict[str, tuple[str, str, int]] = {
    "oa/text-embedding-3-small": ("oa", "text-embedding-3-small", COUNTED),
    "az/my-deployment": ("az", "my-deployment", COUNTED),
    "gem/gemini-embedding-001": ("gem", "gemini-embedding-001", estimated(TEXTS)),
    "vx/text-embedding-005": ("vx", "text-embedding-005", COUNTED),
    "vx/gemini-embedding-001": ("vx", "gemini-embedding-001", COUNTED),
    "br/amazon.titan-embed-text-v2:0": ("br", "amazon.titan-embed-text-v2:0", COUNTED),
    "br/cohere.embed-english-v3": ("br", "cohere.embed-english-v3", COUNTED),
    "br/cohere.embed-v4:0": ("br", "cohere.embed-v4:0", COUNTED),
    "ol/nomic-embed-text": ("ol", "nomic-embed-text", COUNTED),
}


@pytest.mark.parametrize("model", list(KINDS))
@pytest.mark.parametrize("encoding", ["default-base64", "float"])
def test_every_kind_through_openai_python(client: openai.OpenAI, model: str, encoding: str) -> None:
    extra: dict[str, Any] = {} if encoding == "default-base64" else {"encoding_format": "float"}
    raw = client.embeddings.with_raw_response.create(model=model, input=TEXTS, **extra)
    sent = raw.http_request.read()
    assert (b'"encoding_format":"base64"' in sent) == (encoding == "default-base64")
    answer = raw.parse()
    provider, upstream_model, tokens = KINDS[model]
    assert answer.model == model
    assert [d.index for d in answer.data] == [0, 1, 2]
    assert [d.embedding for d in answer.data] == [f32(fake_vector(t)) for t in TEXTS]
    assert answer.usage.prompt_tokens == tokens
    assert answer.usage.total_tokens == tokens
    assert raw.headers["x-gateway-provider"] == provider
    assert raw.headers["x-gateway-model"] == upstream_model
    assert raw.headers["x-gateway-attempts"] == "1"
    assert raw.headers["x-request-id"]


def test_mock_embeddings_are_deterministic(client: openai.OpenAI) -> None:
    first = client.embeddings.create(model="mock/mock", input=["a b c", "d"])
    again = client.embeddings.create(model="mock/mock", input="a b c", encoding_format="float")
    assert len(first.data[0].embedding) == 16
    assert first.data[0].embedding == again.data[0].embedding != first.data[1].embedding
    assert first.usage.prompt_tokens == 3
    sized = client.embeddings.create(model="mock/mock", input="x", dimensions=7)
    assert len(sized.data[0].embedding) == 7


def test_a_500_fails_over_to_the_next_target(client: openai.OpenAI) -> None:
    raw = client.embeddings.with_raw_response.create(model="fallback", input=["one", "two"])
    answer = raw.parse()
    assert answer.model == "fallback"
    assert [d.embedding for d in answer.data] == [fake_vector("one"), fake_vector("two")]
    assert raw.headers["x-gateway-provider"] == "gem"
    assert raw.headers["x-gateway-attempts"] == "3"  # the 500 retried once on its target


def test_one_failed_part_fails_the_whole_attempt_over(
    client: openai.OpenAI, fake: FakeEmbeddings
) -> None:
    texts = ["a", "b", "FAIL", "c", "d"]
    raw = client.embeddings.with_raw_response.create(model="titan-then-openai", input=texts)
    answer = raw.parse()
    assert raw.headers["x-gateway-provider"] == "oa"
    assert raw.headers["x-gateway-attempts"] == "3"  # the 500 retried once on its target
    assert [d.embedding for d in answer.data] == [fake_vector(t) for t in texts]
    assert answer.usage.prompt_tokens == sum(fake_tokens(t) for t in texts)
    with pytest.raises(openai.APIStatusError) as caught:
        client.embeddings.create(model="br/amazon.titan-embed-text-v2:0", input=texts)
    assert caught.value.status_code == 502
    assert "fake outage" in caught.value.message


def test_token_ids_reach_openai_and_skip_text_only_targets(
    client: openai.OpenAI, fake: FakeEmbeddings
) -> None:
    raw = client.embeddings.with_raw_response.create(
        model="tokens-anywhere", input=[[15339, 1917], [89]], encoding_format="float"
    )
    answer = raw.parse()
    assert raw.headers["x-gateway-provider"] == "oa"
    assert raw.headers["x-gateway-attempts"] == "1"
    assert answer.data[0].embedding == fake_vector("15339 1917")
    assert answer.usage.prompt_tokens == fake_tokens("15339 1917") + fake_tokens("89")
    assert fake.requests[-1].body["input"] == [[15339, 1917], [89]]
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="gem/text-embedding-004", input=[1, 2, 3])
    assert caught.value.body["param"] == "input"  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"model": "oa/text-embedding-3-small", "input": ""}, "input"),
        ({"model": "oa/text-embedding-3-small", "input": ["a", ""]}, "input"),
        ({"model": "oa/text-embedding-3-small", "input": []}, "input"),
        ({"model": "oa/x", "input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "oa/x", "input": "a", "dimensions": 0}, "dimensions"),
        ({"model": "br/amazon.titan-embed-text-v1", "input": "a", "dimensions": 256}, "dimensions"),
        ({"model": "claude/claude-sonnet-4-5", "input": "a"}, "model"),
    ],
)
def test_bad_requests_are_openai_shaped_400s(
    client: openai.OpenAI, kwargs: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(**kwargs)
    assert caught.value.status_code == 400
    body: Any = caught.value.body
    assert body["param"] == param
    assert body["type"] == "invalid_request_error"


def test_a_missing_input_and_an_upstream_400(gw: Gateway) -> None:
    with httpx.Client(timeout=10) as http:
        missing = http.post(gw.v1 + "/embeddings", json={"model": "mock/mock"})
        upstream = http.post(gw.v1 + "/embeddings", json={"model": "oa/fail-400", "input": "a"})
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "input"
    assert upstream.status_code == 400
    assert upstream.json()["error"]["message"] == "fake failure 400"
    assert upstream.headers["x-gateway-attempts"] == "1"


def test_a_vertex_error_quoting_the_access_token_does_not_show_it(
    gw: Gateway, fake: FakeEmbeddings
) -> None:
    """The OAuth token of the attempt is a credential like the key: an upstream message that
    quotes it reaches the client redacted (chat always did; embeddings did not)."""
    with httpx.Client(timeout=10) as http:
        answer = http.post(
            gw.v1 + "/embeddings", json={"model": "vx/echo-credential", "input": "a"}
        )
    sent = fake.requests[-1].headers["authorization"]
    assert sent.startswith("Bearer ya29.fake-")
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message == "credential Bearer [redacted] is not allowed here"
    assert sent.removeprefix("Bearer ") not in answer.text


def test_an_upstream_slower_than_total_s_is_a_504(gw: Gateway) -> None:
    with httpx.Client(timeout=10) as http:
        answer = http.post(gw.v1 + "/embeddings", json={"model": "oaslow/slow", "input": "a"})
    assert answer.status_code == 504
    assert answer.json()["error"]["type"] == "timeout_error"
    assert answer.headers["x-gateway-attempts"] == "1"


def test_titan_gets_one_signed_call_per_input(client: openai.OpenAI, fake: FakeEmbeddings) -> None:
    before = len(fake.requests)
    client.embeddings.create(
        model="br/amazon.titan-embed-text-v2:0",
        input=TEXTS,
        dimensions=256,
        encoding_format="float",
    )
    seen = fake.requests[before:]
    assert sorted(r.body["inputText"] for r in seen) == sorted(TEXTS)
    assert all(r.body["dimensions"] == 256 for r in seen)
    for r in seen:
        assert r.path == "/model/amazon.titan-embed-text-v2%3A0/invoke"
        auth = r.headers["authorization"]
        names = auth.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
        now = datetime.strptime(r.headers["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        again = sign(
            "POST",
            f"http://{r.headers['host']}{r.path}",
            {n: r.headers[n] for n in names if n != "host"},
            r.raw,
            access_key="AKIDEXAMPLE",
            secret_key="secret",
            session_token=None,
            region="us-east-1",
            now=now,
        )
        assert again["authorization"] == auth


def test_large_gemini_input_is_split_and_merged_in_order(
    client: openai.OpenAI, fake: FakeEmbeddings
) -> None:
    texts = [f"text number {i}" + "x" * (i % 7) for i in range(230)]
    before = len(fake.requests)
    answer = client.embeddings.create(model="gem/gemini-embedding-001", input=texts, dimensions=3)
    assert [d.embedding for d in answer.data] == [fake_vector(t, 3) for t in texts]
    seen = fake.requests[before:]
    assert sorted(len(r.body["requests"]) for r in seen) == [30, 100, 100]
    assert all(r.headers["x-goog-api-key"] == "AIza-fake" for r in seen)


def test_vertex_uses_the_service_account_token(client: openai.OpenAI, fake: FakeEmbeddings) -> None:
    client.embeddings.create(model="vx/text-embedding-005", input="hi", dimensions=2)
    seen = fake.requests[-1]
    assert seen.path == (
        "/v1/projects/test-project/locations/europe-west4/publishers/google/models/"
        "text-embedding-005:predict"
    )
    assert seen.headers["authorization"].startswith("Bearer ya29.fake-")
    assert seen.body == {
        "instances": [{"content": "hi"}],
        "parameters": {"outputDimensionality": 2},
    }
