"""openai-python's Responses client through a running gateway (`POST /v1/responses`), in
front of fake upstreams of five kinds: OpenAI chat, Anthropic, Gemini and Ollama (translated
from and to the canonical chat format) and the OpenAI Responses API itself (`api:
responses`, frames passed through). Text, parallel calls, text then a call, non-streaming
answers, a multi-turn tool loop, `previous_response_id`, and the errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.e2e.test_errors import error_of
from tests.e2e.test_errors import post
from tests.upstreams import anthropic_upstream
from tests.upstreams import gemini_upstream
from tests.upstreams import ollama_upstream
from tests.upstreams import openai_upstream
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.gemini_upstream import FakeGemini
from tests.upstreams.ollama_upstream import FakeOllama
from tests.upstreams.openai_responses_upstream import RESPONSE_ID
from tests.upstreams.openai_responses_upstream import FakeResponses
from tests.upstreams.openai_responses_upstream import script
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

NATIVE = ("text", "parallel-2", "text-then-call")
OA_ARGS = openai_upstream.EXPECTED_ARGS
HELLO = "".join(openai_upstream.TEXT_PIECES)
Call = tuple[str, dict[str, Any], str | None]  # name, arguments, call_id (None: minted)


def tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    }


TOOLS = [tool(n) for n in ("search_documents", "get_user", "get_weather", "get_time")]


class Fakes:
    def __init__(self) -> None:
        self.openai = FakeOpenAI().start()
        self.anthropic = FakeAnthropic().start()
        self.gemini = FakeGemini().start()
        self.ollama = FakeOllama().start()
        self.responses = FakeResponses().start()

    def stop(self) -> None:
        for fake in (self.openai, self.anthropic, self.gemini, self.ollama, self.responses):
            fake.stop()


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    started = Fakes()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def gw(fakes: Fakes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    native = "".join(
        f"  - {{name: native-{s}, targets: [{{provider: rs, model: {s}, api: responses}}]}}\n"
        for s in NATIVE
    )
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://", responses_ttl_s: 600}}
providers:
  - {{name: up, kind: openai, base_url: "{fakes.openai.base_url}", keys: [{{key: sk-up}}]}}
  - {{name: claude, kind: anthropic, base_url: "{fakes.anthropic.base_url}",
      keys: [{{key: sk-ant}}]}}
  - {{name: gem, kind: gemini, base_url: "{fakes.gemini.base_url}", keys: [{{key: g-key}}]}}
  - {{name: ol, kind: ollama, base_url: "{fakes.ollama.base_url}"}}
  - {{name: rs, kind: openai, base_url: "{fakes.responses.base_url}", keys: [{{key: sk-rs}}]}}
models:
{native}"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-responses"))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def client(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20) as c:
        yield c


def calls_of(names: list[tuple[str, dict[str, Any]]], ids: list[str | None]) -> list[Call]:
    return [(name, args, call_id) for (name, args), call_id in zip(names, ids, strict=True)]


OA_PARALLEL = [(n, OA_ARGS[n]) for n in ("search_documents", "get_user")]
CLAUDE_TEXT = "".join(anthropic_upstream.TOOL_ARGS and anthropic_upstream.TEXT_PIECES)
CLAUDE_IDS: list[str | None] = ["toolu_fake_0", "toolu_fake_1"]
GEM = gemini_upstream.CALLS
OL = ollama_upstream.CALLS
OL_IDS: list[str | None] = list(ollama_upstream.CALL_IDS)
CASES: list[tuple[str, str, list[Call]]] = [
    ("up/text", HELLO, []),
    ("up/interleaved-2", "", calls_of(OA_PARALLEL, ["call_fake_0", "call_fake_1"])),
    ("up/text-then-call", HELLO, [("get_weather", OA_ARGS["get_weather"], "call_text-then-call")]),
    ("claude/text", CLAUDE_TEXT, []),
    ("claude/tools-only", "", calls_of(anthropic_upstream.TOOL_ARGS, CLAUDE_IDS)),
    ("claude/two-tools", CLAUDE_TEXT, calls_of(anthropic_upstream.TOOL_ARGS, CLAUDE_IDS)),
    ("gem/text", "".join(gemini_upstream.TEXT_PIECES), []),
    ("gem/parallel-2", "", calls_of(GEM, [None, None])),
    ("gem/text-then-call", "Let me check.", calls_of(GEM[:1], [None])),
    ("ol/text", "".join(ollama_upstream.TEXT_PIECES), []),
    ("ol/two-calls", "", calls_of(OL, OL_IDS)),
    ("ol/text-then-call", "".join(ollama_upstream.TEXT_PIECES), calls_of(OL[:1], OL_IDS[:1])),
]


def check_output(output: list[Any], text: str, calls: list[Call]) -> None:
    kinds = [item.type for item in output]
    messages = [item for item in output if item.type == "message"]
    got_calls = [item for item in output if item.type == "function_call"]
    if text:
        assert kinds[0] == "message"  # text first, then the calls
        assert "".join(p.text for m in messages for p in m.content) == text
    else:
        assert messages == []
    assert [(c.name, json.loads(c.arguments)) for c in got_calls] == [(n, a) for n, a, _ in calls]
    for got, (_, _, call_id) in zip(got_calls, calls, strict=True):
        assert got.call_id == call_id if call_id else got.call_id.startswith("call_")
        assert got.id.startswith("fc_")
        assert got.status == "completed"
    assert len({c.call_id for c in got_calls}) == len(got_calls)
    assert len({item.id for item in output}) == len(output)


@pytest.mark.parametrize(("model", "text", "calls"), CASES, ids=[c[0] for c in CASES])
def test_stream_helper_final_response(
    client: openai.OpenAI, model: str, text: str, calls: list[Call]
) -> None:
    with client.responses.stream(model=model, input="hi", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert final.id.startswith("resp_")
    assert final.status == "completed"
    assert final.model == model
    check_output(final.output, text, calls)
    assert final.output_text == text
    assert final.usage is not None
    assert final.usage.total_tokens > 0


@pytest.mark.parametrize("model", ["up/text", "claude/two-tools", "ol/two-calls", "gem/parallel-2"])
def test_create_without_stream(client: openai.OpenAI, model: str) -> None:
    text, calls = next((t, c) for m, t, c in CASES if m == model)
    response = client.responses.create(model=model, input="hi", tools=TOOLS, metadata={"k": "v"})
    assert response.object == "response"
    assert response.status == "completed"
    assert response.metadata == {"k": "v"}
    check_output(response.output, text, calls)


def test_tool_loop_through_anthropic(client: openai.OpenAI, fakes: Fakes) -> None:
    question = {"role": "user", "content": "weather and time in Paris?"}
    first = client.responses.create(model="claude/two-tools", input=[question], tools=TOOLS)
    calls = [item for item in first.output if item.type == "function_call"]
    results = [
        {"type": "function_call_output", "call_id": c.call_id, "output": f"result of {c.name}"}
        for c in calls
    ]
    history = [item.model_dump(exclude_none=True) for item in first.output]
    answer = client.responses.create(
        model="claude/text", input=[question, *history, *results], tools=TOOLS
    )
    assert answer.output_text == CLAUDE_TEXT
    sent = fakes.anthropic.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][0] == {"type": "text", "text": CLAUDE_TEXT}
    uses = [b for b in sent[1]["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b["name"], b["input"]) for b in uses] == [
        (f"toolu_fake_{i}", name, args)
        for i, (name, args) in enumerate(anthropic_upstream.TOOL_ARGS)
    ]
    tool_results = [b for b in sent[2]["content"] if b["type"] == "tool_result"]
    assert [b["tool_use_id"] for b in tool_results] == CLAUDE_IDS
    for block, call in zip(tool_results, calls, strict=True):
        assert f"result of {call.name}" in json.dumps(block["content"])


def test_previous_response_id_carries_the_turn_but_not_its_instructions(
    client: openai.OpenAI, fakes: Fakes
) -> None:
    with client.responses.stream(
        model="claude/tools-only", instructions="be terse", input="weather?", tools=TOOLS
    ) as stream:
        first = stream.get_final_response()
    assert fakes.anthropic.requests[-1].body["system"][0]["text"] == "be terse"
    results = [
        {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"}
        for item in first.output
        if item.type == "function_call"
    ]
    with client.responses.stream(
        model="claude/text", previous_response_id=first.id, input=results, tools=TOOLS
    ) as stream:
        second = stream.get_final_response()
    assert second.previous_response_id == first.id
    assert second.output_text == CLAUDE_TEXT
    sent = fakes.anthropic.requests[-1].body
    assert "system" not in sent
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][0]["content"] in ("weather?", [{"type": "text", "text": "weather?"}])
    tool_results = [b for b in sent["messages"][2]["content"] if b["type"] == "tool_result"]
    assert [b["tool_use_id"] for b in tool_results] == CLAUDE_IDS

    third = client.responses.create(model="up/text", previous_response_id=second.id, input="and?")
    messages = fakes.openai.requests[-1].body["messages"]
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert messages[-2]["content"] == CLAUDE_TEXT
    assert third.output_text == HELLO


def test_store_false_is_not_kept(client: openai.OpenAI) -> None:
    first = client.responses.create(model="up/text", input="hi", store=False)
    assert first.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="up/text", input="again", previous_response_id=first.id)


def test_missing_previous_response_is_404(gw: Gateway) -> None:
    body = {"model": "up/text", "input": "hi", "previous_response_id": "resp_missing"}
    status, _, raw = post(gw, json.dumps(body).encode(), "/v1/responses")
    assert status == 404
    error = error_of(raw)
    assert error["param"] == "previous_response_id"
    assert error["code"] == "previous_response_not_found"
    assert "resp_missing" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": "up/text", "input": ', None),
        (b"[]", None),
        (b'{"model": "up/text", "input": "x", "tools": [{"type": "web_search"}]}', "tools[0].type"),
        (b'{"model": "up/text", "input": 5}', "input"),
        (b'{"model": "up/text", "input": "x", "temperature": "hot"}', "temperature"),
        (b'{"input": "x"}', "model"),
        (
            b'{"model": "up/text", "input": [{"type": "function_call", "name": "f"}]}',
            "input[0].call_id",
        ),
        (b'{"model": "up/text", "input": [{"role": "robot", "content": "x"}]}', "input[0].role"),
        (b'{"model": "up/text", "input": "x", "tool_choice": "maybe"}', "tool_choice"),
        (
            b'{"model": "up/text", "input": "x", "text": {"format": {"type": "xml"}}}',
            "text.format.type",
        ),
    ],
)
def test_bad_input_gets_the_openai_error_shape(gw: Gateway, body: bytes, param: str | None) -> None:
    status, _, raw = post(gw, body, "/v1/responses")
    assert status == 400
    assert error_of(raw)["param"] == param


def test_failure_after_commit_is_response_failed(gw: Gateway) -> None:
    body = {"model": "up/error-after", "input": "hi", "stream": True}
    status, _, raw = post(gw, json.dumps(body).encode(), "/v1/responses")
    assert status == 200
    events = sse_events(raw)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    assert [name for name, _ in events][:3] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    assert "response.output_text.delta" in [name for name, _ in events]
    name, failed = events[-1]
    assert name == "response.failed"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["message"]
    assert failed["response"]["output"][0]["content"][0]["text"]


# --- a Responses upstream: frames passed through ----------------------------------------------


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@pytest.mark.parametrize("scenario", NATIVE)
def test_native_stream_is_the_upstreams_own(gw: Gateway, fakes: Fakes, scenario: str) -> None:
    body = {"model": f"native-{scenario}", "input": "hi", "stream": True, "tools": TOOLS}
    status, headers, raw = post(gw, json.dumps(body).encode(), "/v1/responses")
    assert status == 200
    assert headers["x-gateway-provider"] == "rs"
    sent = script(scenario).events
    assert sse_events(raw) == [(e["type"], e) for e in sent]
    upstream = fakes.responses.calls[-1].body
    assert upstream["model"] == scenario
    assert upstream["store"] is False
    assert upstream["input"] == "hi"
    assert upstream["tools"] == TOOLS


def test_native_stream_helper_and_continuation(client: openai.OpenAI, fakes: Fakes) -> None:
    with client.responses.stream(model="native-text-then-call", input="hi", tools=TOOLS) as stream:
        final = stream.get_final_response()
    completed = script("text-then-call").events[-1]["response"]
    assert final.id == RESPONSE_ID
    assert [(i.type, i.id) for i in final.output] == [
        (o["type"], o["id"]) for o in completed["output"]
    ]
    assert [
        (i.call_id, i.name, i.arguments) for i in final.output if i.type == "function_call"
    ] == [
        (o["call_id"], o["name"], o["arguments"])
        for o in completed["output"]
        if o["type"] == "function_call"
    ]
    assert final.output_text == HELLO

    follow_up = client.responses.create(
        model="native-text", previous_response_id=RESPONSE_ID, input="thanks"
    )
    assert follow_up.output_text == HELLO
    upstream = fakes.responses.calls[-1].body
    assert "previous_response_id" not in upstream
    assert upstream["input"] == [
        {"type": "message", "role": "user", "content": "hi"},
        *completed["output"],
        {"type": "message", "role": "user", "content": "thanks"},
    ]


def test_native_create_is_the_upstreams_object(client: openai.OpenAI, gw: Gateway) -> None:
    body = {"model": "native-parallel-2", "input": "hi", "tools": TOOLS}
    status, _, raw = post(gw, json.dumps(body).encode(), "/v1/responses")
    assert status == 200
    assert json.loads(raw) == script("parallel-2").events[-1]["response"]
