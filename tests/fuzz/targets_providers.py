"""Fuzz targets for the provider side: each adapter's stream translator fed by its decoder
through the chunk pipeline (accumulator and chat outbound included), its `unary_result`
and its `error_from_response`.

A stream must end in chat SSE a client can parse (every event one JSON chunk or error
body, `[DONE]` last), whatever the upstream sent, or raise an `UpstreamError` that the
outbound then renders; `unary_result` gives a `chat.completion` JSON body or raises an
`UpstreamError`; `error_from_response` always returns an `UpstreamError`, never raises.
"""

from __future__ import annotations

from typing import Any
from typing import NamedTuple

import msgspec

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamError
from gateway.framing.registry import make_decoder
from gateway.providers.base import NativeRequest
from gateway.providers.base import ProviderAdapter
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.bedrock.config import BedrockKey
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.pipeline import ChunkPipeline
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import ChatRequest
from tests.fuzz.contract import ContractBroken
from tests.fuzz.contract import chat_sse_events
from tests.fuzz.contract import check
from tests.fuzz.contract import pieces
from tests.fuzz.contract import split

_KEY = ProviderKey(key=Secret("sk-fuzz"))
_BEDROCK_KEY = BedrockKey(
    aws_access_key_id=Secret("AKIDFUZZ"), aws_secret_access_key=Secret("fuzz-secret")
)
PROVIDERS: dict[str, ProviderConfig] = {
    "openai": provider_config(name="oa", kind="openai", keys=[_KEY]),
    "anthropic": provider_config(name="an", kind="anthropic", keys=[_KEY]),
    "gemini": provider_config(name="ge", kind="gemini", keys=[_KEY]),
    "ollama": provider_config(name="ol", kind="ollama"),
    "bedrock": provider_config(name="br", kind="bedrock", region="us-east-1", keys=[_BEDROCK_KEY]),
}
_BODY: dict[str, Any] = {
    "model": "fuzz",
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
}
_JSON_ANSWER = {**_BODY, "response_format": {"type": "json_object"}}
_completion = msgspec.json.Decoder(ChatCompletion)


class Dialect(NamedTuple):
    """One way an adapter is called: its provider, target API and client request."""

    provider: str
    api: str = "chat"
    native: str | None = None  # the client API when the upstream speaks it too
    body: dict[str, Any] = _BODY


# The stream targets, by name; the unary and error targets go through all of them.
STREAM_DIALECTS: dict[str, Dialect] = {
    "openai_chat": Dialect("openai"),
    "openai_responses": Dialect("openai", api="responses"),
    "anthropic": Dialect("anthropic"),
    "gemini": Dialect("gemini"),
    "ollama": Dialect("ollama"),
    "bedrock": Dialect("bedrock"),
}
UNARY_DIALECTS: list[tuple[Dialect, str]] = [  # (dialect, seed body in seeds.UNARY_BODIES)
    (Dialect("openai"), "openai"),
    (Dialect("openai", api="responses"), "responses"),
    (Dialect("openai", api="responses", native="responses"), "responses"),
    (Dialect("anthropic"), "anthropic"),
    (Dialect("anthropic", body=_JSON_ANSWER), "anthropic"),
    (Dialect("anthropic", native="messages"), "anthropic"),
    (Dialect("gemini"), "gemini"),
    (Dialect("ollama"), "ollama"),
    (Dialect("bedrock"), "bedrock"),
]


def make_call(dialect: Dialect, *, stream: bool) -> tuple[ProviderAdapter, UpstreamCall]:
    provider = PROVIDERS[dialect.provider]
    native = None
    if dialect.native is not None:
        native = NativeRequest(api=dialect.native, body={"model": "fuzz", "input": "hi"})
    call = UpstreamCall(
        request=msgspec.convert(dialect.body, ChatRequest),
        body=dialect.body,
        provider=provider,
        key=provider.keys[0] if provider.keys else None,
        model="fuzz-model",
        stream=stream,
        request_id="req-fuzz",
        created=1700000000,
        now=1700000000.0,
        api=dialect.api,
        native=native,
    )
    return make_adapter(provider), call


def _run_stream(dialect: Dialect, payload: bytes, cut: int) -> None:
    adapter, call = make_call(dialect, stream=True)
    decoder = make_decoder(adapter.framing)
    acc = StreamAccumulator(single_choice=cut % 2 == 0, id_seed="req-fuzz")
    outbound = ChatOutbound(include_usage=True)
    if cut % 3 == 0:
        outbound.cost_usd = "0.000125"
    pipeline = ChunkPipeline(adapter.translator(call), acc, outbound)
    sent: list[bytes] = []
    try:
        for piece in pieces(payload, cut):
            sent += pipeline.run(decoder.feed(piece), None)
        sent += pipeline.run(decoder.close(), None, closing=True)
        sent.append(outbound.end(acc, pipeline.usage_raw))
        answer = outbound.completion(acc, id="chatcmpl-x", model="m", created=1)
    except UpstreamError as err:
        sent.append(outbound.error(err))
        answer = outbound.completion(acc, id="chatcmpl-x", model="m", created=1)
    chat_sse_events(b"".join(sent))
    try:
        _completion.decode(answer)
    except msgspec.DecodeError as exc:
        raise ContractBroken(f"the accumulated answer is not a chat.completion: {exc}") from None


def stream_target(name: str) -> Any:
    dialect = STREAM_DIALECTS[name]

    def target(data: bytes) -> None:
        cut, payload = split(data)
        _run_stream(dialect, payload, cut)

    target.__name__ = name
    return target


def error_input(provider: int, status: int, body: bytes) -> bytes:
    """The `errors` target's input for that adapter (index in PROVIDERS), status and body."""
    return bytes([provider]) + (status - 100).to_bytes(2, "big") + body


def unary(data: bytes) -> None:
    """First byte: the dialect; the rest, the upstream's non-streaming answer."""
    choice, body = split(data)
    dialect = UNARY_DIALECTS[choice % len(UNARY_DIALECTS)][0]
    adapter, call = make_call(dialect, stream=False)
    try:
        result = adapter.unary_result(call, body)
    except UpstreamError:
        return
    check(isinstance(result, UnaryResult), "unary_result gave no UnaryResult")
    if result.body is body:
        return  # an OpenAI-compatible answer, or a native one, handed on unchanged
    if result.api == "chat":
        try:
            _completion.decode(result.body)
        except msgspec.DecodeError as exc:
            raise ContractBroken(f"the answer is not a chat.completion: {exc}") from None
    else:
        raise ContractBroken(f"a native ({result.api}) answer was changed")


def errors(data: bytes) -> None:
    """Byte 0: the adapter; bytes 1-2: the status (100..599); the rest: the error body,
    whose first line is also sent as the `x-amzn-errortype` header (Bedrock reads it)."""
    if len(data) < 3:
        return
    provider = PROVIDERS[list(PROVIDERS)[data[0] % len(PROVIDERS)]]
    status = 100 + int.from_bytes(data[1:3], "big") % 500
    body = data[3:]
    kind = body.split(b"\n", 1)[0][:200].decode("latin-1")
    headers = {"X-Amzn-ErrorType": kind, "retry-after": kind}
    err = make_adapter(provider).error_from_response(status, body, headers)
    check(isinstance(err, UpstreamError), f"error_from_response gave {err!r}")
    check(isinstance(err.message, str) and bool(err.message), "an error without a message")
    check(err.upstream_status == status, "the upstream status was lost")
    if status in (401, 403):
        check(b"sk-" not in err.message.encode(), "a quoted key reached the error message")
