"""anthropic-python through a running gateway's /v1/messages, in front of fake upstreams of
four provider kinds (openai, gemini, ollama, anthropic): text, parallel tool calls, text
then a call, non-streaming, a multi-turn tool loop, errors in Anthropic's shape, auth by
x-api-key or bearer, count_tokens, keep-alive pings and a failure after the commit point."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams import anthropic_upstream
from tests.upstreams import gemini_upstream
from tests.upstreams import ollama_upstream
from tests.upstreams import openai_upstream
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.anthropic_upstream import count_of
from tests.upstreams.gemini_upstream import FakeGemini
from tests.upstreams.ollama_upstream import FakeOllama
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

MASTER = "sk-gw-master-1"
RID = "req-msg-1"  # sent as x-request-id: Gemini calls get ids minted from it
TOOL_NAMES = ["get_weather", "get_user", "search_documents", "get_time", "now"]
TOOLS: list[Any] = [
    {"name": n, "description": f"the {n} tool", "input_schema": {"type": "object"}}
    for n in TOOL_NAMES
]
HI: list[Any] = [{"role": "user", "content": "hi"}]
OPENAI_TEXT = "".join(openai_upstream.TEXT_PIECES)
SHORT_TEXT = "".join(gemini_upstream.TEXT_PIECES)  # gemini's and ollama's fakes say the same
CLAUDE_TEXT = "".join(anthropic_upstream.TEXT_PIECES)
Fakes = dict[str, Any]


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    started = {
        "up": FakeOpenAI().start(),
        "gem": FakeGemini().start(),
        "ol": FakeOllama().start(),
        "claude": FakeAnthropic().start(),
    }
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(scope="module")
def gw(fakes: Fakes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5, commit_after_s: 0.2, keepalive_s: 0.2}}
store: {{url: "memory://"}}
auth: {{master_key: {MASTER}}}
providers:
  - {{name: up, kind: openai, base_url: "{fakes["up"].base_url}", keys: [{{key: sk-up}}]}}
  - {{name: gem, kind: gemini, base_url: "{fakes["gem"].base_url}", keys: [{{key: gem-key}}]}}
  - {{name: ol, kind: ollama, base_url: "{fakes["ol"].base_url}"}}
  - {{name: claude, kind: anthropic, base_url: "{fakes["claude"].base_url}",
      keys: [{{key: sk-ant-upstream}}]}}
models:
  - name: sonnet
    targets: [{{provider: claude, model: text}}]
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-messages"))
    yield gateway
    stop_gateway(gateway)


def client(gw: Gateway, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("api_key", MASTER)
    return anthropic.Anthropic(base_url=gw.url, max_retries=0, timeout=20, **kwargs)


def streamed(gw: Gateway, model: str, **kwargs: Any) -> anthropic.types.Message:
    with (
        client(gw) as c,
        c.messages.stream(
            model=model,
            max_tokens=300,
            messages=kwargs.pop("messages", HI),
            tools=TOOLS,
            extra_headers={"x-request-id": RID},
            **kwargs,
        ) as stream,
    ):
        for _ in stream:
            pass
        return stream.get_final_message()


def blocks(message: anthropic.types.Message) -> list[tuple[str, ...] | tuple[str, str, str, Any]]:
    out: list[Any] = []
    for block in message.content:
        if block.type == "text":
            out.append(("text", block.text))
        elif block.type == "tool_use":
            out.append(("tool_use", block.id, block.name, block.input))
        else:
            out.append((block.type,))
    return out


def call(call_id: str, name: str, args: dict[str, Any]) -> tuple[str, str, str, Any]:
    return ("tool_use", call_id, name, args)


PARALLEL = {
    "up/interleaved-2": [
        call(f"call_fake_{i}", name, openai_upstream.EXPECTED_ARGS[name])
        for i, name in enumerate(openai_upstream.CALL_NAMES[:2])
    ],
    "gem/parallel-2": [
        call(f"call_{RID}_{i}", name, args) for i, (name, args) in enumerate(gemini_upstream.CALLS)
    ],
    "ol/two-calls": [
        call(ollama_upstream.CALL_IDS[i], name, args)
        for i, (name, args) in enumerate(ollama_upstream.CALLS)
    ],
    "claude/tools-only": [
        call(f"toolu_fake_{i}", name, args)
        for i, (name, args) in enumerate(anthropic_upstream.TOOL_ARGS)
    ],
}
TEXT_THEN_CALL = {
    "up/text-then-call": [
        ("text", OPENAI_TEXT),
        call("call_text-then-call", "get_weather", openai_upstream.EXPECTED_ARGS["get_weather"]),
    ],
    "gem/text-then-call": [
        ("text", "Let me check."),
        call(f"call_{RID}_0", *gemini_upstream.CALLS[0]),
    ],
    "ol/text-then-call": [
        ("text", SHORT_TEXT),
        call(ollama_upstream.CALL_IDS[0], *ollama_upstream.CALLS[0]),
    ],
    "claude/two-tools": [("text", CLAUDE_TEXT), *PARALLEL["claude/tools-only"]],
}


@pytest.mark.parametrize(
    ("model", "text"),
    [
        ("up/text", OPENAI_TEXT),
        ("gem/text", SHORT_TEXT),
        ("ol/text", SHORT_TEXT),
        ("sonnet", CLAUDE_TEXT),
    ],
)
def test_stream_text(gw: Gateway, model: str, text: str) -> None:
    message = streamed(gw, model)
    assert blocks(message) == [("text", text)]
    if model == "sonnet":  # Anthropic itself: its own events pass through (native)
        assert (message.id, message.model) == ("msg_fake", "claude-fake-1")
    else:
        assert message.model == model
        assert message.id == f"msg_{RID}"
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    assert message.usage.output_tokens > 0
    assert message.usage.input_tokens > 0


@pytest.mark.parametrize("model", list(PARALLEL))
def test_stream_two_parallel_calls(gw: Gateway, model: str) -> None:
    message = streamed(gw, model)
    assert blocks(message) == PARALLEL[model]
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize("model", list(TEXT_THEN_CALL))
def test_stream_text_then_calls(gw: Gateway, model: str) -> None:
    message = streamed(gw, model)
    assert blocks(message) == TEXT_THEN_CALL[model]
    assert message.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("up/text", [("text", OPENAI_TEXT)]),
        ("claude/two-tools", TEXT_THEN_CALL["claude/two-tools"]),
        ("gem/parallel-2", PARALLEL["gem/parallel-2"]),
    ],
)
def test_create_without_streaming(gw: Gateway, model: str, expected: list[Any]) -> None:
    with client(gw) as c:
        message = c.messages.create(
            model=model,
            max_tokens=300,
            messages=HI,
            tools=TOOLS,
            extra_headers={"x-request-id": RID},
        )
    assert blocks(message) == expected
    # an Anthropic upstream's own message is passed through (native), model id included
    assert message.model == ("claude-fake-1" if model.startswith("claude/") else model)
    assert message.stop_reason == ("end_turn" if model == "up/text" else "tool_use")


def test_multi_turn_tool_loop_through_openai(gw: Gateway, fakes: Fakes) -> None:
    system = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    first = streamed(gw, "up/text-then-call", system=system)
    tool_use = first.content[1]
    assert tool_use.type == "tool_use"
    history: list[Any] = [
        *HI,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C and sunny"},
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
    ]
    answer = streamed(gw, "up/text", messages=history, system=system)
    assert blocks(answer) == [("text", OPENAI_TEXT)]
    sent = fakes["up"].requests[-1].body
    assert sent["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": OPENAI_TEXT}],
            "tool_calls": [
                {
                    "id": "call_text-then-call",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": json.dumps(
                            openai_upstream.EXPECTED_ARGS["get_weather"], separators=(",", ":")
                        ),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_text-then-call", "content": "18C and sunny"},
        {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]},
    ]
    assert sent["max_completion_tokens"] == 300
    assert sent["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the get_weather tool",
            "parameters": {"type": "object"},
        },
    }
    assert "cache_control" not in json.dumps(sent)
    assert sent["model"] == "text"


def test_cache_control_and_x_api_key_reach_the_anthropic_upstream(
    gw: Gateway, fakes: Fakes
) -> None:
    system = [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}]
    streamed(gw, "claude/text", system=system)
    sent = fakes["claude"].requests[-1]
    assert sent.body["system"] == system
    assert sent.headers["x-api-key"] == "sk-ant-upstream"  # never the client's key


def post(gw: Gateway, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(
        gw.url + path, data=body, headers={"content-type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


KEY = {"x-api-key": MASTER}
GOOD = {"model": "up/text", "max_tokens": 10, "messages": HI}


@pytest.mark.parametrize(
    ("body", "headers", "status", "kind", "words"),
    [
        ({**GOOD, "max_tokens": None}, KEY, 400, "invalid_request_error", "max_tokens"),
        (
            {**GOOD, "messages": [{"role": "user", "content": [{"type": "bogus"}]}]},
            KEY,
            400,
            "invalid_request_error",
            "messages[0].content[0].type",
        ),
        (b"{not json", KEY, 400, "invalid_request_error", "not valid JSON"),
        (GOOD, {}, 401, "authentication_error", "x-api-key"),
        (GOOD, {"x-api-key": "wrong"}, 401, "authentication_error", "Incorrect"),
        ({**GOOD, "model": "nope"}, KEY, 404, "not_found_error", "nope"),
        ({**GOOD, "model": "up/fail-429"}, KEY, 429, "rate_limit_error", "rate limited"),
    ],
)
def test_errors_have_the_anthropic_shape(
    gw: Gateway, body: Any, headers: dict[str, str], status: int, kind: str, words: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got_status, got = post(gw, "/v1/messages", raw, headers)
    assert got_status == status
    assert got["type"] == "error"
    assert set(got["error"]) == {"type", "message"}
    assert got["error"]["type"] == kind
    assert words in got["error"]["message"]


def test_sdk_sees_typed_errors(gw: Gateway) -> None:
    with client(gw, api_key="wrong") as c, pytest.raises(anthropic.AuthenticationError):
        c.messages.create(model="up/text", max_tokens=10, messages=HI)
    with client(gw) as c, pytest.raises(anthropic.BadRequestError) as info:
        c.messages.create(
            model="up/text",
            max_tokens=10,
            messages=HI,
            tools=[{"type": "bash_20250124", "name": "bash"}],
        )
    assert "tools[0].type" in str(info.value)


def test_bearer_auth_works_too(gw: Gateway) -> None:
    with anthropic.Anthropic(base_url=gw.url, auth_token=MASTER, max_retries=0, timeout=20) as c:
        message = c.messages.create(model="up/text", max_tokens=10, messages=HI)
    assert blocks(message) == [("text", OPENAI_TEXT)]


def test_count_tokens_forwarded_for_an_anthropic_model(gw: Gateway, fakes: Fakes) -> None:
    with client(gw) as c:
        counted = c.messages.count_tokens(
            model="sonnet", messages=HI, system="sys", tools=TOOLS[:1]
        )
    sent = fakes["claude"].requests[-1]
    assert counted.input_tokens == count_of(sent.body)
    assert sent.body["model"] == "text"
    assert set(sent.body) == {"model", "messages", "system", "tools"}
    assert sent.headers["x-api-key"] == "sk-ant-upstream"


def test_count_tokens_refused_for_other_kinds(gw: Gateway) -> None:
    status, body = post(
        gw,
        "/v1/messages/count_tokens",
        json.dumps({"model": "up/text", "messages": HI}).encode(),
        KEY,
    )
    assert status == 501
    assert body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert "kind 'openai'" in body["error"]["message"]


def test_count_tokens_upstream_error_keeps_its_status(gw: Gateway) -> None:
    body = json.dumps({"model": "claude/fail-400", "messages": HI}).encode()
    status, got = post(gw, "/v1/messages/count_tokens", body, KEY)
    assert status == 400
    assert got["error"]["type"] == "invalid_request_error"


def test_pings_while_the_upstream_thinks(gw: Gateway) -> None:
    body = json.dumps({**GOOD, "model": "up/think", "stream": True}).encode()
    status, raw = post(gw, "/v1/messages", body, KEY)
    assert status == 200
    frames = raw.decode().split("\n\n")
    assert frames[0].startswith("event: message_start")
    assert 'event: ping\ndata: {"type": "ping"}' in frames
    assert frames[-2].startswith("event: message_stop")


def test_failure_after_the_commit_point_is_an_error_event(gw: Gateway) -> None:
    body = json.dumps({**GOOD, "model": "up/error-after", "stream": True}).encode()
    status, raw = post(gw, "/v1/messages", body, KEY)
    assert status == 200
    frames = [f for f in raw.decode().split("\n\n") if f]
    assert frames[0].startswith("event: message_start")
    name, data = frames[-1].split("\n")
    assert name == "event: error"
    error = json.loads(data.removeprefix("data: "))
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "message_stop" not in raw.decode()
