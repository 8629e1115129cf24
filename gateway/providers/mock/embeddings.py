"""The built-in `mock` provider's embeddings: deterministic vectors, no network, no key.

A text (or a list of token ids) always gets the same unit-length vector, drawn from SHA-256
of the input, `dimensions` long (16 when absent), with float32-exact components so the float
and base64 answers carry the same values. The answer is rendered as an OpenAI embeddings
body and played back through the same path as an upstream's; its usage is the estimate
(about four characters per token, one per token id). Sans-IO.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping

from gateway.errors import BadRequest
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import no_token_source
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import estimate_tokens
from gateway.providers.mock.config import MockProvider
from gateway.providers.openai.embeddings import parse_openai
from gateway.wire.openai_embeddings import Embedding
from gateway.wire.openai_embeddings import EmbeddingsResponse
from gateway.wire.openai_embeddings import EmbeddingsUsage
from gateway.wire.openai_embeddings import encoder

DEFAULT_DIMENSIONS = 16
MAX_DIMENSIONS = 4096


def mock_vector(seed: bytes, dimensions: int) -> list[float]:
    """The unit vector of `seed`, each component exactly representable as float32."""
    raw: list[float] = []
    block = 0
    while len(raw) < dimensions:
        digest = hashlib.sha256(seed + block.to_bytes(4, "big")).digest()
        raw.extend(v / 32768.0 - 1.0 for v in struct.unpack(">16H", digest))
        block += 1
    raw = raw[:dimensions]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    return list(
        struct.unpack(f"<{dimensions}f", struct.pack(f"<{dimensions}f", *(v / norm for v in raw)))
    )


def seed_of(item: str | list[int]) -> bytes:
    if isinstance(item, str):
        return b"t" + item.encode()
    return b"i" + b",".join(str(i).encode() for i in item)


class MockEmbeddings:
    """The `mock` kind."""

    token_source = no_token_source
    takes_token_ids = True

    def __init__(self, provider: MockProvider) -> None:
        self._provider = provider

    def plan(self, call: EmbeddingsCall) -> list[Part]:
        dimensions = call.dimensions or DEFAULT_DIMENSIONS
        if dimensions > MAX_DIMENSIONS:
            raise BadRequest(
                f"the mock model makes at most {MAX_DIMENSIONS} dimensions", param="dimensions"
            )
        texts = call.inputs.texts
        items: list[str | list[int]] = list(texts) if texts is not None else []
        if texts is None:
            items.extend(call.inputs.tokens or [])
            tokens = sum(len(ids) for ids in call.inputs.tokens or [])
        else:
            tokens = estimate_tokens(texts)
        answer = EmbeddingsResponse(
            data=[
                Embedding(index=i, embedding=mock_vector(seed_of(item), dimensions))
                for i, item in enumerate(items)
            ],
            model=call.model,
            usage=EmbeddingsUsage(prompt_tokens=tokens, total_tokens=tokens),
        )
        request = UpstreamRequest(url="mock://embeddings", playback=[encoder.encode(answer)])
        return [Part(request=request, start=0, count=len(items))]

    def parse(
        self, call: EmbeddingsCall, part: Part, body: bytes, headers: Mapping[str, str]
    ) -> PartResult:
        return parse_openai(body)
