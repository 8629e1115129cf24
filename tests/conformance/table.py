"""The conformance table: for each provider adapter, which fake scenario plays each case and
what a client must end up with. A (provider, case) pair a provider cannot express is absent
from its row, with a comment saying why; the tests parametrize over what is present."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import pytest

from gateway.providers.mock.adapter import REPLY
from tests.upstreams import anthropic_upstream as an_fake
from tests.upstreams import bedrock_upstream as br_fake
from tests.upstreams import gemini_upstream as ge_fake
from tests.upstreams import ollama_upstream as ol_fake
from tests.upstreams import openai_upstream as oa_fake

Call = tuple[str, dict[str, Any]]


def tools_for(calls: list[Call]) -> list[Any]:
    """Function tools whose names (and string-typed properties) fit the expected calls."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"the {name} tool",
                "parameters": {
                    "type": "object",
                    "properties": {k: {"type": "string"} for k in args},
                },
            },
        }
        for name, args in calls
    ]


NOW_TOOL: list[Any] = tools_for([("now", {})])


@dataclass(frozen=True)
class Tools:
    """A scenario that ends in tool calls, maybe after some text."""

    model: str
    calls: list[Call]
    text: str | None = None  # content before the calls; None: no content at all
    tools: list[Any] = field(default_factory=list)

    def request_tools(self) -> list[Any]:
        return self.tools or tools_for(self.calls)


@dataclass(frozen=True)
class Provider:
    """One provider's row. A None field is a case this provider cannot express."""

    name: str
    text: tuple[str, str]  # (model, the whole reply)
    parallel: Tools
    text_then_tools: Tools | None
    no_args: Tools
    server_error: str | None  # model answered with an HTTP 5xx before any byte
    stream_error_before: str | None  # model whose 200 stream starts with an error event
    rate_limit: str | None  # model answered with an HTTP 429
    error_after: tuple[str, str] | None  # (model, the content sent before the error event)
    empty_content: str | None  # model that answers the empty-content history


OA = Provider(
    name="oa",
    text=("oa/text", "".join(oa_fake.TEXT_PIECES)),
    parallel=Tools(
        "oa/interleaved-2", [(n, oa_fake.EXPECTED_ARGS[n]) for n in oa_fake.CALL_NAMES[:2]]
    ),
    text_then_tools=Tools(
        "oa/text-then-call",
        [("get_weather", oa_fake.EXPECTED_ARGS["get_weather"])],
        text="".join(oa_fake.TEXT_PIECES),
    ),
    no_args=Tools("oa/no-args", [("now", {})], tools=NOW_TOOL),
    server_error="oa/fail-500",
    stream_error_before="oa/error-before",
    rate_limit="oa/fail-429",
    error_after=("oa/error-after", "".join(oa_fake.TEXT_PIECES[:2])),
    empty_content="oa/text",
)

AN = Provider(
    name="an",
    text=("an/text", "".join(an_fake.TEXT_PIECES)),
    parallel=Tools("an/tools-only", list(an_fake.TOOL_ARGS)),
    text_then_tools=Tools(
        "an/two-tools", list(an_fake.TOOL_ARGS), text="".join(an_fake.TEXT_PIECES)
    ),
    # the fake's no-args message opens with a text block, as Claude's usually do
    no_args=Tools("an/no-args", [("now", {})], text="".join(an_fake.TEXT_PIECES), tools=NOW_TOOL),
    server_error="an/fail-529",
    stream_error_before="an/error-before",
    rate_limit="an/fail-429",
    # the first five events: message_start, ping, block start and two text deltas
    error_after=("an/error-after", "".join(an_fake.TEXT_PIECES[:2])),
    empty_content="an/text",
)

GE = Provider(
    name="ge",
    text=("ge/text", "".join(ge_fake.TEXT_PIECES)),
    parallel=Tools("ge/parallel-2", list(ge_fake.CALLS)),
    text_then_tools=Tools("ge/text-then-call", list(ge_fake.CALLS[:1]), text="Let me check."),
    no_args=Tools("ge/no-args", [("now", {})], tools=NOW_TOOL),
    server_error="ge/fail-503",
    # Gemini reports failures before content as HTTP errors, never as a first stream event
    stream_error_before=None,
    rate_limit="ge/fail-429",
    error_after=("ge/error-after", ge_fake.TEXT_PIECES[0]),
    empty_content="ge/text",
)

# FakeAzure plays its own `text` (Azure's prompt_filter_results chunk first, content filter
# results on every chunk) and `fail-*`; every other scenario is FakeOpenAI's.
AZ = Provider(
    name="az",
    text=("az/text", "".join(oa_fake.TEXT_PIECES)),
    parallel=Tools(
        "az/interleaved-2", [(n, oa_fake.EXPECTED_ARGS[n]) for n in oa_fake.CALL_NAMES[:2]]
    ),
    text_then_tools=Tools(
        "az/text-then-call",
        [("get_weather", oa_fake.EXPECTED_ARGS["get_weather"])],
        text="".join(oa_fake.TEXT_PIECES),
    ),
    no_args=Tools("az/no-args", [("now", {})], tools=NOW_TOOL),
    server_error="az/fail-500",
    stream_error_before="az/error-before",
    rate_limit="az/fail-429",
    error_after=("az/error-after", "".join(oa_fake.TEXT_PIECES[:2])),
    empty_content="az/text",
)

OL = Provider(
    name="ol",
    text=("ol/text", "".join(ol_fake.TEXT_PIECES)),
    # whole calls, one per NDJSON line
    parallel=Tools("ol/two-calls", list(ol_fake.CALLS)),
    text_then_tools=Tools(
        "ol/text-then-call", list(ol_fake.CALLS[:1]), text="".join(ol_fake.TEXT_PIECES)
    ),
    no_args=Tools("ol/no-args", [("now", {})], tools=NOW_TOOL),
    server_error="ol/fail-500",
    # a bare `{"error": ...}` first line in the 200 NDJSON stream
    stream_error_before="ol/error-before",
    # a local Ollama never rate-limits; ollama.com (or a proxy in front) answers 429
    rate_limit="ol/fail-429",
    error_after=("ol/error-mid", ol_fake.TEXT_PIECES[0]),
    empty_content="ol/text",
)

# FakeBedrock's model ids carry no `:` (the gateway percent-encodes it in the URL path).
BR = Provider(
    name="br",
    text=("br/text", "".join(br_fake.TEXT_PIECES)),
    parallel=Tools("br/tools-only", list(br_fake.TOOL_ARGS)),
    text_then_tools=Tools(
        "br/two-tools", list(br_fake.TOOL_ARGS), text="".join(br_fake.TEXT_PIECES)
    ),
    # Claude's one `""` input delta for a call without arguments
    no_args=Tools("br/no-args", [("now", {})], tools=NOW_TOOL),
    server_error="br/fail-500",
    # a 200 event stream whose first frame is an `internalServerException` exception frame
    stream_error_before="br/error-before",
    rate_limit="br/fail-429",
    # two text deltas, a pause, then a `validationException` exception frame
    error_after=("br/error-after", "".join(br_fake.TEXT_PIECES[:2])),
    empty_content="br/text",
)

MOCK_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert",
            "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}}},
        },
    },
]

MOCK = Provider(
    name="mock",
    text=("mock", REPLY),
    parallel=Tools(
        "mock", [("lookup", {"q": "mock", "n": 1}), ("convert", {"unit": "c"})], tools=MOCK_TOOLS
    ),
    # Given tools, the mock always calls them and says nothing: no text before calls.
    text_then_tools=None,
    no_args=Tools("mock", [("now", {})], tools=NOW_TOOL),
    # The mock never fails and sends nothing anywhere: no error case, no recorded request
    # whose validity could be checked.
    server_error=None,
    stream_error_before=None,
    rate_limit=None,
    error_after=None,
    empty_content=None,
)

PROVIDERS = [OA, AN, GE, AZ, OL, BR, MOCK]


def rows(case: str) -> list[Any]:
    """pytest params (id = provider name) for the providers that can express `case`."""
    return [pytest.param(p, id=p.name) for p in PROVIDERS if getattr(p, case) is not None]


# --- what a valid upstream request looks like, per API ---------------------------------------


def check_openai_history(body: dict[str, Any], sent: list[Any]) -> None:
    """OpenAI: the history is forwarded as sent, empty strings kept as empty strings."""
    assert body["messages"] == sent


def check_anthropic_history(body: dict[str, Any]) -> None:
    """Anthropic: user/assistant turns with non-empty content, no empty text block, and
    every tool_result answering a tool_use of the turn before."""
    messages = body["messages"]
    assert messages[0]["role"] == "user"
    previous_uses: set[str] = set()
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in itertools.pairwise(roles)), f"turns: {roles}"
    for m in messages:
        assert m["role"] in ("user", "assistant"), m
        content = m["content"]
        if isinstance(content, str):
            assert content, m
            previous_uses = set()
            continue
        assert content, m  # an empty content list is a 400
        uses = set()
        for block in content:
            if block["type"] == "text":
                assert block["text"], f"empty text block in {m}"
            elif block["type"] == "tool_use":
                assert isinstance(block["input"], dict), block
                uses.add(block["id"])
            elif block["type"] == "tool_result":
                assert block["tool_use_id"] in previous_uses, block
                assert block.get("content", "x") != "", f"empty tool_result content in {m}"
        previous_uses = uses
    assert any(b["type"] == "tool_result" for b in messages[-1]["content"])


def check_gemini_history(body: dict[str, Any]) -> None:
    """Gemini: user/model contents with non-empty parts, no empty text part, and each
    functionResponse naming a function called in the turn before, its response an object."""
    contents = body["contents"]
    previous_calls: set[str] = set()
    roles = [c["role"] for c in contents]
    assert all(a != b for a, b in itertools.pairwise(roles)), f"turns: {roles}"
    for c in contents:
        assert c["role"] in ("user", "model"), c
        assert c["parts"], f"a content without parts: {c}"
        calls = set()
        for part in c["parts"]:
            if "text" in part:
                assert part["text"], f"empty text part in {c}"
            elif "functionCall" in part:
                calls.add(part["functionCall"]["name"])
            elif "functionResponse" in part:
                assert part["functionResponse"]["name"] in previous_calls, part
                assert isinstance(part["functionResponse"]["response"], dict), part
        previous_calls = calls
    assert any("functionResponse" in p for p in contents[-1]["parts"])


def check_ollama_history(body: dict[str, Any], sent: list[Any]) -> None:
    """Ollama: one message per message sent, content a string kept as sent (`""` stays
    `""`), assistant call arguments as objects, and each tool result carrying its content
    and the name of the function it answers."""
    messages = body["messages"]
    assert [m["role"] for m in messages] == [m["role"] for m in sent]
    names: dict[str, str] = {}
    for m, s in zip(messages, sent, strict=True):
        assert m["content"] == s["content"], m
        calls = s.get("tool_calls") or []
        assert len(m.get("tool_calls") or []) == len(calls), m
        for got, tc in zip(m.get("tool_calls") or [], calls, strict=True):
            names[tc["id"]] = tc["function"]["name"]
            assert got["function"]["name"] == tc["function"]["name"], got
            assert got["function"]["arguments"] == json.loads(tc["function"]["arguments"]), got
        if s["role"] == "tool":
            assert m["tool_name"] == names[s["tool_call_id"]], m
    assert messages[-1]["role"] == "tool"


def check_bedrock_history(body: dict[str, Any]) -> None:
    """Bedrock Converse: alternating user/assistant turns with non-empty content lists, no
    empty text block, and every toolResult answering a toolUse of the turn before; a `""`
    tool result is sent with an empty `content` list (bedrock_request.py), never an empty
    text block."""
    messages = body["messages"]
    assert messages[0]["role"] == "user"
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in itertools.pairwise(roles)), f"turns: {roles}"
    previous_uses: set[str] = set()
    for m in messages:
        assert m["role"] in ("user", "assistant"), m
        assert m["content"], f"a turn without blocks: {m}"
        uses = set()
        for block in m["content"]:
            if "text" in block:
                assert block["text"], f"empty text block in {m}"
            elif "toolUse" in block:
                assert isinstance(block["toolUse"]["input"], dict), block
                uses.add(block["toolUse"]["toolUseId"])
            elif "toolResult" in block:
                result = block["toolResult"]
                assert result["toolUseId"] in previous_uses, block
                for part in result.get("content", []):
                    assert part.get("text", "x") != "", f"empty toolResult text in {m}"
        previous_uses = uses
    last = [b for b in messages[-1]["content"] if "toolResult" in b]
    assert last, messages[-1]
    assert last[0]["toolResult"]["content"] == []  # the `""` tool result, as the adapter sends it
