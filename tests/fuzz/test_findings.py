"""Regression tests: each input here is one the fuzzers found (or one of its class), with
the wrong behaviour it had. docs/testing.md lists them with their cause and fix."""

from __future__ import annotations

import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.emulation.envelope import EnvelopeScanner
from gateway.errors import BadRequest
from gateway.errors import UpstreamProtocolError
from gateway.framing.http1 import ResponseParser
from gateway.framing.sse import SSEDecoder
from gateway.providers.bedrock.embeddings import BedrockEmbeddings
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Inputs
from gateway.providers.gemini.request import signature_of
from gateway.providers.gemini.request import signed_call_id
from gateway.providers.openai.adapter import ChatStreamTranslator
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.pipeline import ChunkPipeline
from tests.embeddings.calls import NOW
from tests.fuzz.contract import chat_sse_events
from tests.fuzz.strategies import deep
from tests.fuzz.strategies import to_json
from tests.fuzz.targets_providers import UNARY_DIALECTS
from tests.fuzz.targets_providers import Dialect
from tests.fuzz.targets_providers import make_call
from tests.fuzz.targets_requests import _joined

DEEP = to_json(deep(3000))  # past msgspec's recursion limit
CHUNK_HEAD = b'{"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'


def _stream(body: bytes, cost: str | None = None) -> bytes:
    """An OpenAI chat stream through the chunk pipeline, as the client gets it."""
    adapter, call = make_call(Dialect("openai"), stream=True)
    decoder = SSEDecoder()
    acc = StreamAccumulator()
    outbound = ChatOutbound(include_usage=True)
    outbound.cost_usd = cost
    pipeline = ChunkPipeline(adapter.translator(call), acc, outbound)
    sent = pipeline.run(decoder.feed(body) + decoder.close(), None, closing=True)
    return b"".join(sent) + outbound.end(acc, pipeline.usage_raw)


def test_json_over_several_data_lines_is_one_client_event() -> None:
    """Found: the upstream's bytes went out as they were, LF included, so the client's
    event ended mid-JSON. Such a chunk is now encoded again."""
    body = (
        b"data: " + CHUNK_HEAD + b"\n"
        b'data: "choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
        b"data: [DONE]\n\n"
    )
    events = chat_sse_events(_stream(body))
    assert b'"content":"hi"' in events[0]
    assert events[-1] == b"[DONE]"


def test_invalid_utf8_in_a_skipped_field_is_not_forwarded() -> None:
    """Found: the chunk decoder does not check the fields it skips, so the upstream's
    invalid UTF-8 reached the client, and with a cost to add, `ChatOutbound.end` raised
    DecodeError re-reading the usage chunk."""
    usage = b'"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}'
    body = (
        b"data: " + CHUNK_HEAD + b'"x":"\xff","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        b"data: " + CHUNK_HEAD + b'"x":"\xff",' + usage + b"}\n\n"
        b"data: [DONE]\n\n"
    )
    for cost in (None, "0.5"):
        events = chat_sse_events(_stream(body, cost))
        assert b'"total_tokens":2' in events[-2]


@pytest.mark.parametrize(("dialect", "seed"), UNARY_DIALECTS)
def test_deep_json_from_upstream_is_a_protocol_error(dialect: Dialect, seed: str) -> None:
    """Found: msgspec raises RecursionError, not DecodeError, past its depth limit (even in
    a field it skips): it escaped every decoder of upstream JSON."""
    adapter, call = make_call(dialect, stream=False)
    body = b'{"unknown":' + DEEP + b"}"
    with pytest.raises(UpstreamProtocolError, match="recursion"):
        adapter.unary_result(call, body)
    error = adapter.error_from_response(500, body, {})
    assert error.upstream_status == 500


def test_deep_json_in_a_stream_event_is_a_protocol_error() -> None:
    translator = ChatStreamTranslator()
    event = SSEDecoder().feed(b"data: " + DEEP + b"\n\n")[0]
    with pytest.raises(UpstreamProtocolError):
        translator.feed(event)


def test_deep_json_in_model_text_stays_text() -> None:
    """The envelope scanner decodes candidate tool calls from the model's text."""
    text = '{"name": "f", "arguments": ' + DEEP.decode() + "}"
    scanner = EnvelopeScanner(frozenset({"f"}))
    out = scanner.feed(text) + scanner.close()
    assert "".join(p for p in out if isinstance(p, str)) == text


@pytest.mark.parametrize("kind", ["gemini", "ollama"])
def test_deep_tool_arguments_from_a_client_are_a_400(kind: str) -> None:
    """The Gemini and Ollama request builders parse the client's tool-call arguments."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": DEEP.decode()},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": DEEP.decode()},
        ],
    }
    adapter, call = make_call(Dialect(kind, body=body), stream=True)
    with pytest.raises(BadRequest):
        adapter.build_request(call)


def test_tool_input_that_is_not_utf8_is_a_protocol_error() -> None:
    """Found: a tool call's input is kept as raw JSON (msgspec.Raw, unchecked), and
    `bytes.decode()` raised UnicodeDecodeError (Anthropic and Bedrock answers)."""
    answers = {
        "anthropic": b'{"id":"m","content":[{"type":"tool_use","id":"t","name":"f",'
        b'"input":{"a":"\xff"}}]}',
        "bedrock": b'{"output":{"message":{"content":[{"toolUse":{"toolUseId":"t",'
        b'"name":"f","input":{"a":"\xff"}}}]}}}',
    }
    for provider, body in answers.items():
        adapter, call = make_call(Dialect(provider), stream=False)
        with pytest.raises(UpstreamProtocolError, match="UTF-8"):
            adapter.unary_result(call, body)


@pytest.mark.parametrize("digits", ["²³¹", "2¹1", "٢٠٠"])
def test_status_code_of_non_ascii_digits_is_a_protocol_error(digits: str) -> None:
    """Found: `str.isdigit()` is true for "²" (the head is read as latin-1), and `int()`
    then raised ValueError."""
    with pytest.raises(UpstreamProtocolError, match="status line"):
        ResponseParser().feed(f"HTTP/1.1 {digits} OK\r\n\r\n".encode())


def test_token_count_header_of_non_ascii_digits_is_ignored() -> None:
    """Found: `int("¹")` raised ValueError on Bedrock's token-count header."""
    provider = provider_config(
        name="br", kind="bedrock", region="us-east-1", keys=[ProviderKey(key=Secret("k"))]
    )
    family = BedrockEmbeddings(provider)
    call = EmbeddingsCall(
        inputs=Inputs(texts=["a"]),
        body={"model": "x", "input": "a"},
        dimensions=None,
        provider=provider,
        key=provider.keys[0],
        model="amazon.titan-embed-text-v2:0",
        now=NOW,
    )
    [part] = family.plan(call)
    body = b'{"embedding":[0.5]}'
    result = family.parse(call, part, body, {"x-amzn-bedrock-input-token-count": "¹"})
    assert result.prompt_tokens is None
    result = family.parse(call, part, body, {"x-amzn-bedrock-input-token-count": "7"})
    assert result.prompt_tokens == 7


def test_signed_call_id_of_non_ascii_digits_is_not_signed() -> None:
    """Found: a client's tool-call id `gts²_...` made `int()` raise in the Gemini request
    builder (a 500 for a client's request)."""
    assert signature_of("gts²_AA_call") is None
    assert signature_of(signed_call_id("call_1", "sign")) == "sign"


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        # past the fence bounds the fence is text; the bare object after it is still a call
        ("Here ```json" + "A" * 35 + '\n{"name": "f", "arguments": {}}\n``` done', 1),
        ("Here ```json" + " " * 70 + '{"name": "f", "arguments": {}}\n``` done', 1),
        ("Here {" + " " * 70 + '"name": "f", "arguments": {}} done', 0),
    ],
)
def test_envelope_bounds_do_not_depend_on_cuts(text: str, calls: int) -> None:
    """Found: a fence info string over 16 characters, or over 64 spaces before the `{` or
    its first key, ended the candidate when text arrived piece by piece but not when it
    arrived whole, so the same answer gave other pieces depending on the cuts."""

    def scan(reads: list[str]) -> list[object]:
        scanner = EnvelopeScanner(frozenset({"f"}))
        out: list[object] = []
        for read in reads:
            out += scanner.feed(read)
        return out + scanner.close()

    found, prose = _joined(scan([text]))
    assert _joined(scan(list(text))) == (found, prose)
    assert len(found) == calls
    assert prose.startswith(text[:12])  # the fence head stays text
