"""One conformance suite every provider adapter must pass, through one gateway process and
real clients (openai-python, langchain-openai): text, parallel tools, text then tools, a tool
without arguments, usage, errors before and after the first byte, empty content in history.

The providers are `oa` (openai kind, FakeOpenAI), `an` (anthropic kind, FakeAnthropic), `ge`
(gemini kind, FakeGemini), `az` (azure kind, FakeAzure), `ol` (ollama kind, FakeOllama), `br`
(bedrock kind, FakeBedrock) and the built-in `mock`. Which scenario plays each case, and which
cases a provider cannot express, is in `tests.conformance.table`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.conformance.table import Provider
from tests.conformance.table import check_anthropic_history
from tests.conformance.table import check_bedrock_history
from tests.conformance.table import check_gemini_history
from tests.conformance.table import check_ollama_history
from tests.conformance.table import check_openai_history
from tests.conformance.table import rows
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.azure_upstream import FakeAzure
from tests.upstreams.bedrock_upstream import FakeBedrock
from tests.upstreams.gemini_upstream import FakeGemini
from tests.upstreams.ollama_upstream import FakeOllama
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

HI: list[Any] = [{"role": "user", "content": "hi"}]
Fakes = dict[str, Any]
AZURE_KEY = "az-key"


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    started: Fakes = {}
    try:
        started["oa"] = FakeOpenAI().start()
        started["an"] = FakeAnthropic().start()
        started["ge"] = FakeGemini().start()
        started["az"] = FakeAzure(key=AZURE_KEY).start()
        started["ol"] = FakeOllama().start()
        started["br"] = FakeBedrock().start()
        yield started
    finally:
        for fake in started.values():
            fake.stop()


@pytest.fixture(scope="module")
def gw(fakes: Fakes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    timeouts = "timeouts: {first_byte_s: 5, idle_s: 5}"
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
# the failures these tests provoke (and their retries) must not open a key's circuit
routing: {{circuit_failures: 1000}}
providers:
  - name: oa
    kind: openai
    base_url: {fakes["oa"].base_url}
    keys: [{{key: sk-oa-test}}]
    {timeouts}
  - name: an
    kind: anthropic
    base_url: {fakes["an"].base_url}
    keys: [{{key: sk-ant-test}}]
    {timeouts}
  - name: ge
    kind: gemini
    base_url: {fakes["ge"].base_url}
    keys: [{{key: gk-test}}]
    {timeouts}
  - name: az
    kind: azure
    base_url: {fakes["az"].base_url}
    api_version: "2024-10-21"
    keys: [{{key: {AZURE_KEY}}}]
    {timeouts}
  - name: ol
    kind: ollama
    base_url: {fakes["ol"].base_url}
    {timeouts}
  - name: br
    kind: bedrock
    region: us-east-1
    base_url: {fakes["br"].base_url}
    keys: [{{aws_access_key_id: AKIDEXAMPLE, aws_secret_access_key: secret}}]
    {timeouts}
  - name: mock
    kind: mock
models:
  - name: mock
    targets: [{{provider: mock, model: mock}}]
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-conformance"))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def oai(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20) as c:
        yield c


def post_raw(gw: Gateway, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        gw.v1 + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer client-key"},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        with err:  # the error holds the response's socket
            return err.code, err.read()


def finishes_of(chunks: list[Any]) -> list[str]:
    return [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]


# --- 1. plain text ----------------------------------------------------------------------------


@pytest.mark.parametrize("p", rows("text"))
def test_text_streaming(oai: openai.OpenAI, p: Provider) -> None:
    model, text = p.text
    chunks = list(oai.chat.completions.create(model=model, messages=HI, stream=True))
    assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == text
    assert all(c.index == 0 for ch in chunks for c in ch.choices)
    assert not any(c.delta.tool_calls for ch in chunks for c in ch.choices)
    assert finishes_of(chunks) == ["stop"]


@pytest.mark.parametrize("p", rows("text"))
def test_text_non_streaming(oai: openai.OpenAI, p: Provider) -> None:
    model, text = p.text
    completion = oai.chat.completions.create(model=model, messages=HI)
    assert len(completion.choices) == 1
    assert completion.choices[0].message.content == text
    assert not completion.choices[0].message.tool_calls
    assert completion.choices[0].finish_reason == "stop"


# --- 2-4. tool calls ----------------------------------------------------------------------------


def check_stream_helper(oai: openai.OpenAI, model: str, tools: list[Any]) -> Any:
    """The openai-python stream helper's final completion, after its shape checks."""
    with oai.chat.completions.stream(model=model, messages=HI, tools=tools) as stream:
        finishes = [
            c.finish_reason
            for ev in stream
            if ev.type == "chunk"
            for c in ev.chunk.choices
            if c.finish_reason
        ]
        final = stream.get_final_completion()
    assert finishes == ["tool_calls"]
    assert len(final.choices) == 1
    assert final.choices[0].finish_reason == "tool_calls"
    calls = final.choices[0].message.tool_calls or []
    assert [c.index for c in calls] == list(range(len(calls)))  # type: ignore[attr-defined]
    assert len({c.id for c in calls}) == len(calls)
    assert all(c.id for c in calls)
    return final.choices[0].message


@pytest.mark.parametrize("p", rows("parallel"))
def test_parallel_tools_openai_stream_helper(oai: openai.OpenAI, p: Provider) -> None:
    case = p.parallel
    message = check_stream_helper(oai, case.model, case.request_tools())
    calls = message.tool_calls
    assert len(calls) == 2
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == case.calls
    assert (message.content or None) == case.text


@pytest.mark.parametrize("p", rows("parallel"))
def test_parallel_tools_langchain(gw: Gateway, p: Provider) -> None:
    case = p.parallel
    llm = ChatOpenAI(
        model=case.model,
        base_url=gw.v1,
        api_key="client-key",  # type: ignore[arg-type]
        streaming=True,
        max_retries=0,
        timeout=20,
    ).bind_tools(case.request_tools())
    total: Any = None
    for chunk in llm.stream("go"):
        total = chunk if total is None else total + chunk
    assert total is not None
    assert [(c["name"], c["args"]) for c in total.tool_calls] == case.calls
    assert len({c["id"] for c in total.tool_calls}) == 2
    assert not total.invalid_tool_calls
    assert total.content == (case.text or "")


@pytest.mark.parametrize("p", rows("text_then_tools"))
def test_text_then_tools(oai: openai.OpenAI, p: Provider) -> None:
    case = p.text_then_tools
    assert case is not None
    assert case.text
    message = check_stream_helper(oai, case.model, case.request_tools())
    assert message.content == case.text
    calls = message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == case.calls


@pytest.mark.parametrize("p", rows("no_args"))
def test_tool_without_arguments(oai: openai.OpenAI, p: Provider) -> None:
    case = p.no_args
    message = check_stream_helper(oai, case.model, case.request_tools())
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [("now", "{}")]
    assert json.loads(message.tool_calls[0].function.arguments) == {}
    assert (message.content or None) == case.text


# --- 5. usage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("p", rows("text"))
def test_usage_when_asked_is_one_last_chunk(oai: openai.OpenAI, p: Provider) -> None:
    model, text = p.text
    chunks = list(
        oai.chat.completions.create(
            model=model, messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    assert [i for i, ch in enumerate(chunks) if ch.usage is not None] == [len(chunks) - 1]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.prompt_tokens > 0
    assert last.usage.completion_tokens > 0
    assert last.usage.total_tokens > 0
    assert "".join(c.delta.content or "" for ch in chunks for c in ch.choices) == text


@pytest.mark.parametrize("p", rows("text"))
def test_no_usage_unless_asked(oai: openai.OpenAI, p: Provider) -> None:
    chunks = list(oai.chat.completions.create(model=p.text[0], messages=HI, stream=True))
    assert all(ch.usage is None for ch in chunks)
    # The one chunk without choices allowed: Azure's prompt-filter chunk, passed through as
    # Azure sends it (docs/providers.md, "Content filtering").
    assert all(ch.choices or (ch.model_extra or {}).get("prompt_filter_results") for ch in chunks)


@pytest.mark.parametrize("p", rows("text"))
def test_usage_non_streaming(oai: openai.OpenAI, p: Provider) -> None:
    usage = oai.chat.completions.create(model=p.text[0], messages=HI).usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens > 0


# --- 6. errors before the first byte ------------------------------------------------------------

STREAMING = pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])


@STREAMING
@pytest.mark.parametrize("p", rows("server_error"))
def test_upstream_5xx_is_a_502(oai: openai.OpenAI, p: Provider, stream: bool) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        oai.chat.completions.create(model=p.server_error, messages=HI, stream=stream)  # type: ignore[call-overload]
    assert info.value.status_code == 502


@pytest.mark.parametrize("p", rows("stream_error_before"))
def test_error_event_before_content_is_a_502(oai: openai.OpenAI, p: Provider) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        oai.chat.completions.create(model=p.stream_error_before, messages=HI, stream=True)  # type: ignore[call-overload]
    assert info.value.status_code == 502


@STREAMING
@pytest.mark.parametrize("p", rows("rate_limit"))
def test_upstream_429_is_a_rate_limit(oai: openai.OpenAI, p: Provider, stream: bool) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        oai.chat.completions.create(model=p.rate_limit, messages=HI, stream=stream)  # type: ignore[call-overload]
    assert info.value.status_code == 429


# --- 7. error after the first content -----------------------------------------------------------


@pytest.mark.parametrize("p", rows("error_after"))
def test_error_after_content_raises_after_the_content(oai: openai.OpenAI, p: Provider) -> None:
    assert p.error_after is not None
    model, before = p.error_after
    got: list[str] = []

    def read() -> None:
        with oai.chat.completions.create(model=model, messages=HI, stream=True) as stream:
            for ch in stream:
                got.extend(c.delta.content or "" for c in ch.choices)

    with pytest.raises(openai.APIError) as info:
        read()
    assert not isinstance(info.value, openai.APIStatusError)  # the status was already 200
    assert "".join(got) == before


@pytest.mark.parametrize("p", rows("error_after"))
def test_error_after_content_raw_bytes(gw: Gateway, p: Provider) -> None:
    assert p.error_after is not None
    model, before = p.error_after
    status, data = post_raw(gw, {"model": model, "messages": HI, "stream": True})
    assert status == 200
    assert data.endswith(b"data: [DONE]\n\n")
    events = [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])
    assert set(error) == {"error"}
    assert error["error"]["message"]
    chunks = [json.loads(e) for e in events[:-2]]
    assert all("error" not in ch for ch in chunks)
    text = "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
    assert text == before


# --- 8. empty content in the history ------------------------------------------------------------

EMPTY_HISTORY: list[Any] = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": ""},
]


@pytest.mark.parametrize("p", rows("empty_content"))
def test_empty_content_history_is_valid_upstream(gw: Gateway, fakes: Fakes, p: Provider) -> None:
    status, data = post_raw(gw, {"model": p.empty_content, "messages": EMPTY_HISTORY})
    assert status == 200, data
    body = fakes[p.name].requests[-1].body
    if p.name in ("oa", "az"):
        check_openai_history(body, EMPTY_HISTORY)
    elif p.name == "an":
        check_anthropic_history(body)
    elif p.name == "ol":
        check_ollama_history(body, EMPTY_HISTORY)
    elif p.name == "br":
        check_bedrock_history(body)
    else:
        check_gemini_history(body)
