"""openai-python through a running gateway in front of the fake Azure OpenAI upstream: both
path styles, `api-key` auth, Azure's content-filter annotations, usage, the filter error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.azure_upstream import MODEL_VERSION
from tests.upstreams.azure_upstream import USAGE
from tests.upstreams.azure_upstream import FakeAzure
from tests.upstreams.openai_upstream import TEXT_PIECES

pytestmark = pytest.mark.e2e

KEY = "az-key"
HI: list[Any] = [{"role": "user", "content": "hi"}]
TEXT = "".join(TEXT_PIECES)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAzure]:
    upstream = FakeAzure(KEY).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeAzure, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - name: az
    kind: azure
    base_url: {fake.base_url}
    api_version: "2024-10-21"
    keys: [{{key: {KEY}}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
  - name: azv1
    kind: azure
    base_url: {fake.base_url}/openai/v1
    api_version: v1
    keys: [{{key: {KEY}}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-azure"))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def oai(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20) as c:
        yield c


def assert_azure_auth(headers: dict[str, str]) -> None:
    assert headers["api-key"] == KEY
    assert "Authorization" not in headers


@pytest.mark.parametrize("usage", [False, True])
def test_deployment_stream(oai: openai.OpenAI, fake: FakeAzure, usage: bool) -> None:
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    chunks = list(oai.chat.completions.create(model="az/text", messages=HI, stream=True, **extra))
    assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == TEXT
    assert [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason] == ["stop"]
    # Azure's prompt-filter chunk reaches the client as Azure sent it: no choices, its filters
    first = chunks[0]
    assert first.choices == []
    assert first.model_extra is not None
    assert first.model_extra["prompt_filter_results"][0]["prompt_index"] == 0
    content = [c for ch in chunks for c in ch.choices if c.delta.content]
    assert all(c.model_extra and "content_filter_results" in c.model_extra for c in content)
    with_usage = [ch for ch in chunks if ch.usage is not None]
    if usage:
        assert len(with_usage) == 1
        assert chunks[-1] is with_usage[0]
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.total_tokens == 14
    else:
        assert with_usage == []

    sent = fake.calls[-1]
    assert sent.path == "/openai/deployments/text/chat/completions"
    assert sent.query == {"api-version": "2024-10-21"}
    assert_azure_auth(sent.headers)
    assert sent.body["model"] == "text"
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}


def test_deployment_stream_helper(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(model="az/text", messages=HI) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert final.choices[0].message.content == TEXT
    assert final.choices[0].finish_reason == "stop"
    assert final.model == MODEL_VERSION


def test_deployment_unary(oai: openai.OpenAI, fake: FakeAzure) -> None:
    result = oai.chat.completions.create(model="az/text", messages=HI)
    assert result.choices[0].message.content == TEXT
    assert result.choices[0].finish_reason == "stop"
    assert result.usage is not None
    assert result.usage.total_tokens == USAGE["total_tokens"]
    assert result.model_extra is not None
    assert "prompt_filter_results" in result.model_extra

    sent = fake.calls[-1]
    assert sent.path == "/openai/deployments/text/chat/completions"
    assert sent.query == {"api-version": "2024-10-21"}
    assert_azure_auth(sent.headers)
    assert "stream" not in sent.body


@pytest.mark.parametrize("stream", [False, True])
def test_v1_api(oai: openai.OpenAI, fake: FakeAzure, stream: bool) -> None:
    if stream:
        chunks = list(
            oai.chat.completions.create(
                model="azv1/text",
                messages=HI,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == TEXT
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.total_tokens == 14
    else:
        result = oai.chat.completions.create(model="azv1/text", messages=HI)
        assert result.choices[0].message.content == TEXT
    sent = fake.calls[-1]
    assert sent.path == "/openai/v1/chat/completions"
    assert sent.query == {}
    assert_azure_auth(sent.headers)
    assert sent.body["model"] == "text"


def test_filtered_output_finishes_with_content_filter(oai: openai.OpenAI) -> None:
    chunks = list(oai.chat.completions.create(model="az/filtered", messages=HI, stream=True))
    assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == "".join(
        TEXT_PIECES[:2]
    )
    assert [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason] == [
        "content_filter"
    ]
    result = oai.chat.completions.create(model="azv1/filtered", messages=HI)
    assert result.choices[0].finish_reason == "content_filter"


@pytest.mark.parametrize("model", ["az/content-filter", "azv1/content-filter"])
@pytest.mark.parametrize("stream", [False, True])
def test_content_filter_error_is_a_400(oai: openai.OpenAI, model: str, stream: bool) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model=model, messages=HI, stream=stream)
    assert info.value.status_code == 400
    assert info.value.code == "content_filter"
    assert info.value.param == "prompt"
    assert info.value.type == "invalid_request_error"
    assert "content management policy" in info.value.message


def test_server_error_is_a_502(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        oai.chat.completions.create(model="az/fail-500", messages=HI)
    assert info.value.status_code == 502
