"""The anthropic adapter in native mode: an Anthropic Messages client's own request goes
upstream with only `model` and `stream` set; its answer comes back as the upstream wrote it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamProtocolError
from gateway.framing.sse import SSEDecoder
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import NativeRequest
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import provider_config
from gateway.wire.openai_chat import ChatRequest
from tests.fixtures import FIXTURES
from tests.providers.stream_view import client_chunks

SIGNATURE = "EqQBCkgIARABGAIiQL2+sig/=="
# everything the canonical chat format cannot carry, in one Messages request
CLIENT_BODY: dict[str, Any] = {
    "model": "sonnet",
    "max_tokens": 2048,
    "stream": True,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "tools": [
        {"name": "get_weather", "input_schema": {"type": "object"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
    ],
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "a doc"},
                    "citations": {"enabled": True},
                },
                {"type": "text", "text": ""},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Look it up.", "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}],
        },
    ],
    "metadata": {"user_id": None},
    "a_field_from_the_future": {"nested": [1, None, ""]},
}


def adapter() -> AnthropicAdapter:
    return AnthropicAdapter(provider_config(name="claude", kind="anthropic", base_url=None))


def native_call(
    body: dict[str, Any], *, stream: bool = True, headers: dict[str, str] | None = None
) -> UpstreamCall:
    return UpstreamCall(
        request=msgspec.convert({"model": body["model"], "messages": []}, ChatRequest),
        body={"model": body["model"], "messages": []},
        provider=provider_config(name="claude", kind="anthropic"),
        key=ProviderKey(key=Secret("sk-ant-upstream")),
        model="claude-sonnet-4-5",
        stream=stream,
        request_id="req1",
        native=NativeRequest(api="messages", body=body, headers=headers or {}),
    )


@pytest.mark.parametrize("stream", [True, False])
def test_the_client_body_goes_upstream_except_model_and_stream(stream: bool) -> None:
    sent = adapter().build_request(native_call(CLIENT_BODY, stream=stream))
    assert sent.url == "https://api.anthropic.com/v1/messages"
    upstream = json.loads(sent.body)
    assert upstream == {**CLIENT_BODY, "model": "claude-sonnet-4-5", "stream": stream}
    # the keys keep the client's order too
    assert list(upstream) == list(CLIENT_BODY)
    assistant = upstream["messages"][1]["content"]
    assert assistant[0]["signature"] == SIGNATURE
    assert assistant[1]["type"] == "redacted_thinking"
    assert assistant[2]["cache_control"] == {"type": "ephemeral"}
    assert upstream["messages"][0]["content"][0]["type"] == "document"
    assert upstream["messages"][0]["content"][1] == {"type": "text", "text": ""}
    assert upstream["metadata"] == {"user_id": None}
    assert CLIENT_BODY["model"] == "sonnet"  # the client's body itself is left as it was


def test_stream_is_set_when_the_client_left_it_out() -> None:
    body = {k: v for k, v in CLIENT_BODY.items() if k != "stream"}
    sent = json.loads(adapter().build_request(native_call(body, stream=False)).body)
    assert sent["stream"] is False


def test_headers_carry_the_gateway_key_and_the_client_beta() -> None:
    beta = "interleaved-thinking-2025-05-14,files-api-2025-04-14"
    sent = adapter().build_request(native_call(CLIENT_BODY, headers={"anthropic-beta": beta}))
    assert sent.headers["anthropic-beta"] == beta
    assert sent.headers["x-api-key"] == "sk-ant-upstream"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["accept"] == "text/event-stream"


def test_no_beta_header_unless_the_client_sent_one() -> None:
    sent = adapter().build_request(native_call(CLIENT_BODY))
    assert "anthropic-beta" not in sent.headers


def test_unary_answer_is_the_upstream_bytes() -> None:
    answer = {
        "id": "msg_up_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": SIGNATURE},
            {
                "type": "text",
                "text": "x",
                "citations": [{"type": "char_location", "cited_text": "a"}],
            },
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 4, "output_tokens": 7},
    }
    raw = json.dumps(answer, indent=1).encode()  # odd spacing: any re-encoding would show
    result = adapter().unary_result(native_call(CLIENT_BODY, stream=False), raw)
    assert result.api == "messages"
    assert result.body is raw
    assert result.model == "claude-sonnet-4-5-20250929"
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (14, 7)


def test_unary_malformed_answer_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        adapter().unary_result(native_call(CLIENT_BODY, stream=False), b"{not json")


def test_the_translator_still_reads_the_stream() -> None:
    """Usage and tool-call identity come from the translator in native mode too; a
    `response_format` on the canonical request never makes a call an answer tool here."""
    call = native_call(CLIENT_BODY)
    call.request.response_format = {"type": "json_object"}
    translator = adapter().translator(call)
    raw = (FIXTURES / "anthropic_text_then_tool.sse").read_bytes()
    decoder = SSEDecoder()
    chunks = [t.chunk for f in [*decoder.feed(raw), *decoder.close()] for t in translator.feed(f)]
    calls = [c for chunk in chunks for ch in chunk.choices for c in ch.delta.tool_calls or []]
    assert calls[0].id == "toolu_01NRLabsLyVHZPKxbKvkfSMn"
    assert {c.index for c in calls} == {1}  # the upstream's content block: text came first
    sent = client_chunks(chunks)
    assert {c.index for s in sent for ch in s.choices for c in ch.delta.tool_calls or []} == {0}
    assert translator.done
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 377
