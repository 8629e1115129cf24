"""What every embeddings provider family shares: the call, the plan of upstream parts, the
merge of their answers in input order, and the OpenAI answer (floats or base64). Sans-IO.

A provider family turns one `EmbeddingsCall` into a list of `Part`s (an upstream request and
the slice of the inputs it carries), then parses each part's answer into a `PartResult`.
`merge` checks that every part gave one vector per input it carried and sums the usage.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Callable
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from typing import Protocol

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.errors import BadRequest
from gateway.errors import UpstreamProtocolError
from gateway.providers.base import Credential
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamRequest
from gateway.wire import DECODE_ERRORS
from gateway.wire.openai_embeddings import Embedding
from gateway.wire.openai_embeddings import EmbeddingsResponse
from gateway.wire.openai_embeddings import EmbeddingsUsage
from gateway.wire.openai_embeddings import encoder

MAX_INPUTS = 2048  # OpenAI's own limit per request
CHARS_PER_TOKEN = 4  # the estimate used where an upstream reports no token count


class Inputs(msgspec.Struct, frozen=True):
    """The client's `input`, checked: texts, or token-id lists (never both)."""

    texts: list[str] | None = None
    tokens: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.tokens or [])


def _token_ids(value: list[Any]) -> list[int] | None:
    """`value` as token ids, None when it is not a list of non-negative integers."""
    for item in value:
        if type(item) is not int or item < 0:
            return None
    return value


def parse_input(value: Any) -> Inputs:
    """The client's `input`, or a 400 naming it: a non-empty string, or a non-empty list of
    non-empty strings, of token ids, or of non-empty lists of token ids."""
    if isinstance(value, str):
        if not value:
            raise BadRequest("'input' cannot be an empty string", param="input")
        return Inputs(texts=[value])
    if not isinstance(value, list):
        raise BadRequest(
            "'input' must be a string, a list of strings, a list of token ids or a list of "
            "lists of token ids",
            param="input",
        )
    if not value:
        raise BadRequest("'input' cannot be an empty list", param="input")
    if len(value) > MAX_INPUTS:
        raise BadRequest(f"'input' has more than {MAX_INPUTS} items", param="input")
    if all(isinstance(item, str) for item in value):
        for i, text in enumerate(value):
            if not text:
                raise BadRequest(f"'input[{i}]' cannot be an empty string", param="input")
        return Inputs(texts=list(value))
    if all(isinstance(item, list) for item in value):
        lists: list[list[int]] = []
        for i, item in enumerate(value):
            ids = _token_ids(item)
            if not item or ids is None:
                raise BadRequest(
                    f"'input[{i}]' must be a non-empty list of non-negative token ids",
                    param="input",
                )
            lists.append(ids)
        return Inputs(tokens=lists)
    ids = _token_ids(value)
    if ids is None:
        raise BadRequest(
            "'input' must be a list of strings, of token ids or of lists of token ids; not a mix",
            param="input",
        )
    return Inputs(tokens=[ids])


class EmbeddingsCall(msgspec.Struct):
    """One attempt at one target: the request's part (inputs, body, dimensions), then the
    attempt's (provider, key, upstream model, signing time, token)."""

    inputs: Inputs
    body: dict[str, Any]  # the client's JSON as sent (OpenAI-compatible upstreams get it)
    dimensions: int | None
    provider: ProviderBase
    key: ProviderKey | None
    model: str  # the upstream model id
    now: datetime  # for request signing (sans-IO: the clock is read by the caller)
    credential: Credential | None = None  # what the family's `token_source` yielded


class Part(msgspec.Struct, kw_only=True):
    """One upstream request carrying inputs[start:start + count]."""

    request: UpstreamRequest
    start: int
    count: int


class PartResult(msgspec.Struct, kw_only=True):
    vectors: list[list[float]]
    prompt_tokens: int | None  # None: the upstream did not say; merge estimates it


class EmbeddingsProvider(Protocol):
    """One provider family's embeddings, configured for one provider entry."""

    takes_token_ids: bool  # False: token-id input is a 400 (checked before any credential)

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        """The access token `key` needs fetched first (None: none), as for chat."""
        ...

    def plan(self, call: EmbeddingsCall) -> list[Part]: ...

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult: ...


def texts_of(call: EmbeddingsCall) -> list[str]:
    """The texts of a call to a provider that embeds text only."""
    if call.inputs.texts is None:
        raise BadRequest(
            f"provider {call.provider.name!r} (kind {call.provider.kind}) embeds text only; "
            "token-id input is accepted by openai and azure providers",
            param="input",
        )
    return call.inputs.texts


def no_dimensions(call: EmbeddingsCall, what: str) -> None:
    if call.dimensions is not None:
        raise BadRequest(
            f"'dimensions' is not supported by {what} (model {call.model!r})", param="dimensions"
        )


def batches(count: int, size: int) -> list[tuple[int, int]]:
    """(start, count) of consecutive slices of at most `size` items covering `count` items."""
    return [(start, min(size, count - start)) for start in range(0, count, size)]


def batched_parts(
    texts: list[str],
    size: int,
    url: str,
    headers: dict[str, str],
    body_of: Callable[[list[str]], bytes],
) -> list[Part]:
    """One upstream request per batch of at most `size` texts, each `body_of(batch)` sent to
    `url` with `headers`."""
    return [
        Part(
            request=UpstreamRequest(
                url=url, headers=dict(headers), body=body_of(texts[start : start + count])
            ),
            start=start,
            count=count,
        )
        for start, count in batches(len(texts), size)
    ]


def estimate_tokens(texts: list[str]) -> int:
    """About four characters per token, at least one per input."""
    return sum(max(1, math.ceil(len(t) / CHARS_PER_TOKEN)) for t in texts)


def decode_json(decoder: msgspec.json.Decoder[Any], body: bytes, what: str) -> Any:
    try:
        return decoder.decode(body)
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"upstream sent a malformed {what}: {exc}") from None


def merge(
    call: EmbeddingsCall, parts: list[Part], results: list[PartResult]
) -> tuple[list[list[float]], int]:
    """All vectors in input order and the prompt tokens of the whole request."""
    vectors: list[list[float]] = []
    tokens = 0
    texts = call.inputs.texts
    for part, result in zip(parts, results, strict=True):
        if len(result.vectors) != part.count:
            raise UpstreamProtocolError(
                f"the upstream answered {len(result.vectors)} embeddings for {part.count} inputs"
            )
        vectors.extend(result.vectors)
        if result.prompt_tokens is not None:
            tokens += result.prompt_tokens
        elif texts is not None:
            tokens += estimate_tokens(texts[part.start : part.start + part.count])
        else:
            lists = (call.inputs.tokens or [])[part.start : part.start + part.count]
            tokens += sum(len(ids) for ids in lists)
    return vectors, tokens


def float32_base64(vector: list[float]) -> str:
    """The vector as OpenAI's base64: little-endian float32 bytes."""
    try:
        packed = struct.pack(f"<{len(vector)}f", *vector)
    except (OverflowError, struct.error):
        raise UpstreamProtocolError("the upstream sent a value outside float32 range") from None
    return base64.b64encode(packed).decode("ascii")


def floats_of_base64(text: str) -> list[float]:
    """An upstream's base64 vector (little-endian float32) as floats."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise UpstreamProtocolError("the upstream sent an embedding that is not base64") from None
    if len(raw) % 4:
        raise UpstreamProtocolError("the upstream's base64 embedding is not float32 data")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def render(vectors: list[list[float]], model: str, prompt_tokens: int, base64: bool) -> bytes:
    """The OpenAI embeddings answer; `model` is the name the client sent."""
    data = [
        Embedding(index=i, embedding=float32_base64(v) if base64 else v)
        for i, v in enumerate(vectors)
    ]
    usage = EmbeddingsUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens)
    return encoder.encode(EmbeddingsResponse(data=data, model=model, usage=usage))
