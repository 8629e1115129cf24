"""Fuzz targets for what is neither a byte decoder nor a provider stream: the inbound request
translators (Messages, Responses), the embeddings parsers (the client's `input` and each
family's upstream answer), the tool-call envelope scanner, and the accumulator fed chat
chunks directly (several choices, any identities).

A client's request, whatever JSON object it is, gives a typed result or a `ClientError`
(a 4xx naming the field); an upstream's answer gives a typed result or an `UpstreamError`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.emulation.envelope import MAX_ENVELOPE_CHARS
from gateway.emulation.envelope import EmulatedCall
from gateway.emulation.envelope import EnvelopeScanner
from gateway.errors import BadRequest
from gateway.errors import ClientError
from gateway.errors import UpstreamError
from gateway.inbound.messages_request import CanonicalRequest
from gateway.inbound.messages_request import translate_request
from gateway.inbound.responses_request import ResponsesRequest
from gateway.inbound.responses_request import to_chat
from gateway.providers.base import BearerToken
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Inputs
from gateway.providers.embeddings import merge
from gateway.providers.embeddings import parse_input
from gateway.providers.embeddings import render
from gateway.providers.openai.adapter import forwardable
from gateway.providers.registry import embeddings_provider
from gateway.providers.registry import provider_config
from gateway.server.request_body import typed
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.wire.anthropic import InboundRequest
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import chunk_decoder
from tests.embeddings.calls import NOW
from tests.fuzz.contract import chat_sse_events
from tests.fuzz.contract import check
from tests.fuzz.contract import json_value
from tests.fuzz.contract import pieces
from tests.fuzz.contract import split

_encode = msgspec.json.encode


def messages_request(data: bytes) -> None:
    body = json_value(data)
    if not isinstance(body, dict):
        return
    try:
        params = typed(body, InboundRequest)
    except BadRequest:
        return
    for count_only in (False, True):
        try:
            result = translate_request(params, count_only=count_only)
        except ClientError as err:
            check(bool(err.message), "a 4xx without a message")
            continue
        check(isinstance(result, CanonicalRequest), "no canonical request")
        check(isinstance(result.request, ChatRequest), "no typed chat request")
        _encode(result.body)  # what an OpenAI-compatible upstream is sent


def responses_request(data: bytes) -> None:
    body = json_value(data)
    if not isinstance(body, dict):
        return
    try:
        parsed = typed(body, ResponsesRequest)
    except BadRequest:
        return
    given = body.get("input")
    history = given if isinstance(given, list) else []
    for previous in ([], history):
        try:
            request, chat = to_chat(parsed, body, previous)
        except ClientError as err:
            check(bool(err.message), "a 4xx without a message")
            continue
        check(isinstance(request, ChatRequest), "no typed chat request")
        _encode(chat)


_EMBEDDING_PROVIDERS = {
    "openai": (provider_config(name="oa", kind="openai"), "text-embedding-3-small"),
    "gemini": (provider_config(name="ge", kind="gemini"), "gemini-embedding-001"),
    "vertex": (
        provider_config(name="vx", kind="vertex", project="p", region="us-central1"),
        "text-embedding-005",
    ),
    "titan": (
        provider_config(
            name="br", kind="bedrock", region="us-east-1", keys=[ProviderKey(key=Secret("k"))]
        ),
        "amazon.titan-embed-text-v2:0",
    ),
    "cohere": (
        provider_config(
            name="br", kind="bedrock", region="us-east-1", keys=[ProviderKey(key=Secret("k"))]
        ),
        "cohere.embed-english-v3",
    ),
    "ollama": (provider_config(name="ol", kind="ollama"), "nomic-embed-text"),
}
EMBEDDING_FAMILIES = list(_EMBEDDING_PROVIDERS)


def embeddings(data: bytes) -> None:
    """Byte 0: the family; then the upstream's answer (its first line also sent as the
    Bedrock token-count header). The JSON of the answer is also tried as a client `input`."""
    choice, body = split(data)
    provider, model = _EMBEDDING_PROVIDERS[EMBEDDING_FAMILIES[choice % len(EMBEDDING_FAMILIES)]]
    value = json_value(body)
    if value is not None:
        with contextlib.suppress(BadRequest):  # a 400 naming `input` is the contract
            check(isinstance(parse_input(value), Inputs), "parse_input gave no Inputs")
    family = embeddings_provider(provider)
    texts = ["first input", "second"]
    call = EmbeddingsCall(
        inputs=Inputs(texts=texts),
        body={"model": "client", "input": texts},
        dimensions=None,
        provider=provider,
        key=provider.keys[0] if provider.keys else None,
        model=model,
        now=NOW,
        credential=BearerToken(token="token", expires_at=0.0),
    )
    parts = family.plan(call)
    header = body.split(b"\n", 1)[0][:64].decode("latin-1")
    headers = {"X-Amzn-Bedrock-Input-Token-Count": header}
    try:
        results = [family.parse(call, part, body, headers) for part in parts]
        vectors, tokens = merge(call, parts, results)
        for as_base64 in (False, True):
            render(vectors, "client", tokens, as_base64)
    except UpstreamError:
        return


_TOOL_NAMES = frozenset({"f", "get_weather", "search"})


def envelope(data: bytes) -> None:
    """A model's text (UTF-8, errors replaced) cut anywhere: the same pieces as in one
    read, and no text lost (each text piece is found, in order, in the input)."""
    cut, payload = split(data)
    text = payload.decode("utf-8", "replace")

    def scan(reads: list[str]) -> list[Any]:
        scanner = EnvelopeScanner(_TOOL_NAMES)
        out: list[Any] = []
        for read in reads:
            out += scanner.feed(read)
            held = sum(map(len, scanner._object or ())) + len(scanner._pending)
            check(held <= MAX_ENVELOPE_CHARS + len(read) + 64, f"{held} characters held")
        return out + scanner.close()

    reads = [p.decode("utf-8", "replace") for p in pieces(text.encode(), cut)]
    got = scan(reads)
    if "".join(reads) == text:  # a cut inside a character changes the text itself
        check(_joined(got) == _joined(scan([text])), "cut-dependent pieces")
    for piece in got:
        if isinstance(piece, str):
            check(bool(piece), "an empty text piece")
        else:
            check(piece.name in _TOOL_NAMES, f"a call of an unknown tool {piece.name!r}")
            check(isinstance(json_value(piece.arguments.encode()), dict), "arguments not an object")


def _joined(items: list[Any]) -> tuple[list[EmulatedCall], str]:
    """The calls, and the text joined: what does not depend on where text pieces split."""
    return [x for x in items if isinstance(x, EmulatedCall)], "".join(
        x for x in items if isinstance(x, str)
    )


def accumulator(data: bytes) -> None:
    """Lines of chat chunk JSON (other lines skipped, as the translator would refuse them)
    into the accumulator with every choice kept apart, out through the chat outbound."""
    cut, payload = split(data)
    acc = StreamAccumulator(single_choice=cut % 2 == 1)
    outbound = ChatOutbound(include_usage=cut % 4 < 2)
    sent: list[bytes] = []
    try:
        # lines as SSE data gives them: never with a CR or LF inside
        for line in payload.replace(b"\r", b"\n").split(b"\n"):
            try:
                chunk = chunk_decoder.decode(line)
            except (msgspec.DecodeError, RecursionError):
                continue
            fixed = acc.add(chunk)
            if fixed is not None:
                raw = line if fixed is chunk and forwardable(line) else None  # as the translator
                sent.append(outbound.chunk(fixed, raw))
        sent.append(outbound.end(acc, None))
    except UpstreamError as err:
        sent.append(outbound.error(err))
    chat_sse_events(b"".join(sent))
    _encode(acc.completion(id="x", model="m", created=1))
